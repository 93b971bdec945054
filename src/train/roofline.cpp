#include "train/roofline.h"

#include <algorithm>

#include "kernels/types.h"

namespace fp8lm {
namespace {

// Bytes per element.
constexpr double kBf16 = 2, kFp8 = 1, kFp4 = 0.5, kFp32 = 4;

double seconds(double flops, double tflops, double bytes, double tb_per_s) {
  return std::max(flops / (tflops * 1e12), bytes / (tb_per_s * 1e12));
}

bool per_tensor(ScalingKind r) {
  return r == ScalingKind::Delayed || r == ScalingKind::Current;
}

}  // namespace

const std::vector<GpuPeaks>& datasheet_gpus() {
  // NVIDIA's datasheets (dense: half the sparse figures they print first).
  static const std::vector<GpuPeaks> gpus = {
      {"H100 SXM", 989.4, 1978.9, 0.0, 3.35, false, false},
      {"H200 SXM", 989.4, 1978.9, 0.0, 4.8, false, false},
      {"B200", 2250.0, 4500.0, 9000.0, 8.0, true, true},
  };
  return gpus;
}

std::vector<GemmShape> fp8_gemms(const TrainConfig& c) {
  const GPTConfig& m = c.model;
  const int64_t tokens = c.batch_size * m.seq_len, C = m.d_model;
  const int64_t qkv = C + 2 * m.kv_width(), fc1 = activation_input_width(m.activation, m.ffn);
  struct Linear {
    const char* name;
    int64_t in, out;
  };
  const Linear linears[] = {{"qkv", C, qkv}, {"proj", C, C}, {"fc1", C, fc1}, {"fc2", m.ffn, C}};
  std::vector<GemmShape> out;
  for (const Linear& l : linears) {
    const std::string n = l.name;
    out.push_back({n + " fprop", tokens, l.out, l.in, m.n_layers});
    out.push_back({n + " dgrad", tokens, l.in, l.out, m.n_layers});
    out.push_back({n + " wgrad", l.out, l.in, tokens, m.n_layers});
  }
  return out;
}

GemmEstimate estimate_gemm(const GemmShape& g, const GpuPeaks& gpu, ScalingKind recipe) {
  const double M = static_cast<double>(g.M), N = static_cast<double>(g.N),
               K = static_cast<double>(g.K);
  const double flops = 2 * M * N * K, out_bytes = kFp32 * M * N;
  GemmEstimate e;
  e.bf16_s =
      seconds(flops, gpu.bf16_tflops, kBf16 * (M * K + K * N) + out_bytes, gpu.memory_tb_per_s);
  const bool fp4 = recipe == ScalingKind::Nvfp4;
  e.native = per_tensor(recipe) || recipe == ScalingKind::Block ||
             (recipe == ScalingKind::Mxfp8 && gpu.mxfp8_native) || (fp4 && gpu.nvfp4_native);
  const double element = fp4 ? kFp4 : kFp8;
  const double peak = fp4 ? gpu.fp4_tflops : gpu.fp8_tflops;
  e.fp8_s = e.native
                ? seconds(flops, peak, element * (M * K + K * N) + out_bytes, gpu.memory_tb_per_s)
                : e.bf16_s;
  // The casts: each operand read in BF16 once (twice under current scaling: its amax first),
  // written in the recipe's format once; the fprop's and the dgrad's A operands a second time
  // transposed (for the wgrad, which casts nothing itself). The fprop's weight is read in FP32
  // (the master copy). A GPU that cannot run the recipe still casts (to decode afterwards).
  const bool fprop = g.name.ends_with("fprop"), dgrad = g.name.ends_with("dgrad");
  if (!fprop && !dgrad) return e;
  const double a = M * K, b = K * N;
  const double reads = recipe == ScalingKind::Current ? 2 : 1;
  double bytes = reads * kBf16 * a + element * a * 2;       // A, row- and column-wise
  if (fprop) bytes += reads * kFp32 * b + element * b * 2;  // the weight, both ways
  e.cast_s = bytes / (gpu.memory_tb_per_s * 1e12);
  return e;
}

StepEstimate estimate_step(const TrainConfig& c, const GpuPeaks& gpu, ScalingKind recipe) {
  StepEstimate s;
  for (const GemmShape& g : fp8_gemms(c)) {
    const GemmEstimate e = estimate_gemm(g, gpu, recipe);
    const auto n = static_cast<double>(g.per_step);
    s.gemm_bf16_s += n * e.bf16_s;
    s.gemm_fp8_s += n * e.fp8_s;
    s.cast_s += n * e.cast_s;
  }
  const GPTConfig& m = c.model;
  const double B = static_cast<double>(c.batch_size), T = static_cast<double>(m.seq_len),
               C = static_cast<double>(m.d_model), F = static_cast<double>(m.ffn),
               V = static_cast<double>(m.vocab), L = static_cast<double>(m.n_layers);
  // Attention in BF16 (flash): Q·Kᵀ and P·V, causal half, backward twice the forward.
  const double attention = 3 * 2 * 2 * B * T * T * C * 0.5 * L;
  // The LM head in BF16: forward, dgrad, wgrad.
  const double head = 3 * 2 * B * T * C * V;
  // Norms, residual adds, activation, in BF16: forward reads and writes 20 B·T·C and 4 B·T·F
  // bytes per layer, backward twice that.
  const double elementwise = 3 * (20 * B * T * C + 4 * B * T * F) * L;
  s.other_s =
      (attention + head) / (gpu.bf16_tflops * 1e12) + elementwise / (gpu.memory_tb_per_s * 1e12);
  return s;
}

std::vector<std::string> roofline_assumptions() {
  return {
      "peaks are the datasheets' dense figures (H100 SXM and H200 SXM: 989 TFLOP/s BF16, 1979 "
      "FP8; B200: 2250 BF16, 4500 FP8, 9000 FP4) and memory bandwidths (3.35, 4.8, 8 TB/s); "
      "real GEMMs reach 70-85% of them, on both sides of the ratio",
      "a GEMM takes the longer of its FLOPs at the peak and its bytes at the bandwidth: A and "
      "B read once (2 bytes an element in BF16, 1 in FP8, 0.5 in FP4), C written once in FP32",
      "the recipe adds casts, each a pass over memory: the fprop's input and the dgrad's "
      "output gradient read in BF16 and written in FP8 row-wise and column-wise (for the "
      "wgrad), the weight read in FP32 and written both ways; current scaling reads each "
      "tensor once more for its amax; no cast is fused into the producer before it",
      "MXFP8 and NVFP4 are native on B200 alone: on H100 and H200 their GEMMs run in BF16 after "
      "the casts, as fp8lm's emulation does; Float8BlockScaling runs on cuBLASLt's "
      "block-scaled FP8 GEMMs",
      "the rest of the step is the same in BF16 and FP8: attention (flash, BF16, causal) and "
      "the LM head at the BF16 peak, norms, residual adds and the activation at the "
      "bandwidth (20 B·T·C + 4 B·T·F bytes a layer forward, twice that backward); optimizer, "
      "communication and launch overheads are left out",
  };
}

}  // namespace fp8lm
