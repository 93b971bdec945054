// The CPU backend: host memory, the kernels of kernels/cpu with their ISA dispatch, and the
// nominal bytes each op moves (kernels/traffic.h: every operand counted once per call).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <new>
#include <vector>

#include "core/grown.h"
#include "fp8/quantize.h"
#include "fp8/scaling.h"
#include "fp8lm/error.h"
#include "kernels/backend.h"
#include "kernels/cpu/activations.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/attention_unfused.h"
#include "kernels/cpu/casts.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/norms.h"
#include "kernels/cpu/optimizer.h"
#include "kernels/cpu/rope.h"
#include "kernels/cpu/row_reduce.h"
#include "kernels/op_times.h"
#include "kernels/traffic.h"

namespace fp8lm {
namespace {

// Bytes an add_bias pass moves: y read and written, the bias read.
int64_t add_bias_traffic(int64_t rows, int64_t C) {
  return rows * C * 8 + C * 4;
}

// memset over the OpenMP threads where the buffer is large (a step zeroes every gradient, tens
// of MiB, which one thread writes at about half the rate two do).
void zero_in_parallel(void* p, size_t bytes) {
  constexpr size_t kSerial = size_t{1} << 20;
  if (bytes == 0) return;  // p may be null then, which memset may not be given
  if (bytes < kSerial) return void(std::memset(p, 0, bytes));
#pragma omp parallel
  {
    const auto [lo, hi] = cpu::thread_share(static_cast<int64_t>(bytes));
    if (lo < hi) std::memset(static_cast<char*>(p) + lo, 0, static_cast<size_t>(hi - lo));
  }
}

// Whole cache lines, as the vectorized kernels like them.
constexpr std::align_val_t kAlignment{64};

int64_t out_bytes(const ProducerOut& out, const char* op) {
  if (out.blocks.row) return out.blocks.col ? 4 : 2;  // the BF16 operands written
  return static_cast<int64_t>(dtype_size(producer_out_dtype(out, op)));
}

// The amax max-accumulated (a NaN already there stays, as the scaling state keeps it; the
// cast's own amax ignores NaN), the counts added, as the CUDA producers do.
void commit_cast(const Fp8Out& q, const CastStats& st) {
  if (q.amax && !std::isnan(*q.amax) && st.amax > *q.amax) *q.amax = st.amax;
  if (q.saturated) *q.saturated += static_cast<unsigned long long>(st.saturated);
  if (q.flushed) *q.flushed += static_cast<unsigned long long>(st.flushed);
}

// A block-scaled output's casts are of the producer's [rows, cols] output.
void check_block_rows(const BlockProducerOut& y, int64_t rows, int64_t cols, const char* op) {
  if (y.row->grid.rows != rows || y.row->grid.cols != cols)
    throw Error(fmt::format("{}: a block-scaled output of {} x {} for an output of {} x {}", op,
                            y.row->grid.rows, y.row->grid.cols, rows, cols));
}

// How a producer (a norm, bias + activation) serves a ProducerOut: its FP32 kernel, or its
// fused twin that rounds each row to BF16 (the CUDA kernels also round their FP32 result per
// element), casts it to FP8 codes as it is made, or casts it block-scaled a stripe of rows at a
// time. fp32(float* y) and bf16(bf16_t* y) compute the values into y; fp8(codes, decoded, scale,
// format) returns the cast's statistics; blocks(out.blocks) casts.
template <class Fp32, class Bf16, class Fp8, class Blocks>
void produce(const ProducerOut& out, const char* op, Fp32 fp32, Bf16 bf16, Fp8 fp8, Blocks blocks) {
  if (out.blocks.row && !out.y && !out.y16 && !out.y8.data) return blocks(out.blocks);
  switch (producer_out_dtype(out, op)) {
    case DType::F32:
      return fp32(out.y);
    case DType::BF16:
      return bf16(out.y16);
    default:
      return commit_cast(out.y8, fp8(out.y8.data, out.y8.decoded, *out.y8.scale, out.y8.format));
  }
}

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  bool produces_block_casts() const override { return true; }
  bool supports(OptionalOp) const override { return true; }
  bool fp8_gemms_take_decoded() const override { return true; }

  void* allocate(size_t bytes) override { return ::operator new(bytes, kAlignment); }
  void release(void* p) override { ::operator delete(p, kAlignment); }
  void upload(void* dst, const void* host, size_t bytes) override {
    const HostOpScope op(OpKind::Copy);
    if (bytes) std::memcpy(dst, host, bytes);
  }
  void download(void* host, const void* src, size_t bytes) override {
    const HostOpScope op(OpKind::Copy);
    if (bytes) std::memcpy(host, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const HostOpScope op(OpKind::Copy);
    if (bytes) std::memmove(dst, src, bytes);
  }
  void copy_if(void* dst, const void* src, size_t bytes, const int32_t* flag) override {
    const HostOpScope op(OpKind::Copy);
    if (*flag) copy(dst, src, bytes);
  }
  void zero(void* p, size_t bytes) override {
    const HostOpScope op(OpKind::Copy);
    zero_in_parallel(p, bytes);
  }

  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
    const HostOpScope op(OpKind::Copy);
    for (size_t r = 0; r < rows; ++r) {
      std::memcpy(static_cast<char*>(dst) + r * dst_pitch,
                  static_cast<const char*>(src) + r * src_pitch, row_bytes);
    }
  }

  void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A,
            const GemmOperand& B, float beta, float* C) override {
    const HostOpScope op(OpKind::Gemm);
    cpu::gemm(ta, tb, M, N, K, alpha, A, B, beta, C);  // counts its own traffic
  }
  void gemm_bias(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                 const GemmOperand& A, const GemmOperand& B, const float* bias, float* C) override {
    const HostOpScope op(OpKind::Gemm);
    count_traffic(add_bias_traffic(M, N));  // cpu::gemm counts the product's
    cpu::gemm(ta, tb, M, N, K, alpha, A, B, 0.0f, C, bias);
  }

  void norm_forward(const NormParams& n, const NormStats& st, ProducerOut out, float* s,
                    const float* x, const float* r, int64_t rows) override {
    const HostOpScope op(OpKind::Norm);
    // x (and r) in, s out with r; y out in its dtype.
    count_traffic(rows * n.C * (4 + (r ? 8 : 0) + out_bytes(out, "norm_forward")));
    if (r != nullptr && s == nullptr) throw Error("norm_forward: residual r without s");
    produce(
        out, "norm_forward",
        [&](float* y) {
          cpu::norm_forward(n.kind, y, s, st.mean, st.rstd, x, r, n.gamma, n.beta, rows, n.C,
                            n.eps);
        },
        [&](bf16_t* y) {
          cpu::norm_forward_bf16(n.kind, y, s, st.mean, st.rstd, x, r, n.gamma, n.beta, rows, n.C,
                                 n.eps);
        },
        [&](uint8_t* q, bf16_t* decoded, float scale, DType f) {
          return cpu::norm_forward_fp8(n.kind, q, scale, f, s, st.mean, st.rstd, x, r, n.gamma,
                                       n.beta, rows, n.C, n.eps, decoded);
        },
        [&](const BlockProducerOut& y) {
          check_block_rows(y, rows, n.C, "norm_forward");
          cpu::norm_forward_blocks(n.kind, y, s, st.mean, st.rstd, x, r, n.gamma, n.beta, n.C,
                                   n.eps);
        });
  }
  void norm_backward(const NormParams& n, const NormStats& st, float* dx, float* dgamma,
                     float* dbeta, const float* dy, const float* x, int64_t rows) override {
    const HostOpScope op(OpKind::Norm);
    count_traffic(rows * n.C * 16);  // dy, x, dx read and written
    cpu::norm_backward(n.kind, dx, dgamma, dbeta, dy, x, n.gamma, st.mean, st.rstd, rows, n.C);
  }
  void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act, int64_t rows,
                        int64_t F) override {
    const HostOpScope op(OpKind::Elementwise);
    // h read (and, with the bias added, written back); the activation out in its dtype.
    count_traffic(rows * activation_input_width(act, F) * (bias ? 8 : 4) +
                  rows * F * out_bytes(out, "bias_act_forward"));
    produce(
        out, "bias_act_forward", [&](float* y) { cpu::bias_act_forward(y, h, bias, act, rows, F); },
        [&](bf16_t* y) { cpu::bias_act_forward_bf16(y, h, bias, act, rows, F); },
        // A null bias adds nothing (Llama's unbiased MLP, and the unfused twin's GEMM added it).
        [&](uint8_t* q, bf16_t* decoded, float scale, DType f) {
          return cpu::bias_act_forward_fp8(q, scale, f, h, bias, act, rows, F, decoded);
        },
        [&](const BlockProducerOut& y) {
          check_block_rows(y, rows, F, "bias_act_forward");
          cpu::bias_act_forward_blocks(y, h, bias, act, F);
        });
  }
  void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                    int64_t F) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(rows * (F + 2 * activation_input_width(act, F)) * 4);
    cpu::act_backward(dh, dy, h, act, rows, F);
  }
  void act_backward_bf16(float* dh, const float* dy, const bf16_t* h, float*, Activation act,
                         int64_t rows, int64_t F) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(rows * (F * 4 + activation_input_width(act, F) * 6));
    cpu::act_backward(dh, dy, h, act, rows, F);
  }

  void add_bias(float* y, const float* bias, int64_t rows, int64_t C) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(add_bias_traffic(rows, C));
    cpu::add_bias(y, bias, rows, C);
  }
  void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(rows * C * 4 + C * 8);
    cpu::bias_backward(dbias, dy, rows, C);
  }
  void bias_backward_bf16(float* dbias, bf16_t* dy16, const float* dy, int64_t rows,
                          int64_t C) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(rows * C * 6 + C * 8);
    cpu::bias_backward(dbias, dy, rows, C, dy16);
  }
  void add(float* y, const float* a, const float* b, int64_t n) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(n * 12);
#pragma omp parallel for schedule(static)
    for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
  }
  void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(n * 6);
    cpu::fp32_to_bf16(y, x, n);
  }
  void bf16_to_fp32(float* y, const bf16_t* x, int64_t n) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(n * 6);
    cpu::bf16_to_f32(y, x, n);
  }
  void quantize(const Fp8Out& out, const float* x, int64_t n) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(n * 5);
    commit_cast(out, cpu::quantize_fp8(out.data, out.decoded, x, n, *out.scale, out.format));
  }
  void absmax(float* amax, const float* x, int64_t n) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(n * 4);
    const float a = cpu::absmax_parallel(x, n);
    if (a > *amax) *amax = a;
  }
  void quantize_transposed(const Fp8Out& out, uint8_t* transposed, const float* x, int64_t rows,
                           int64_t cols) override {
    const HostOpScope op(OpKind::Cast);
    const int64_t n = rows * cols;
    count_traffic(n * (out.data ? 6 : 5));
    thread_local std::vector<uint8_t> rowwise;
    uint8_t* codes = out.data;
    if (!codes) codes = grown(rowwise, static_cast<size_t>(n));
    commit_cast(out, cpu::quantize_fp8(codes, out.decoded, x, n, *out.scale, out.format));
    cpu::transpose_bytes(transposed, codes, rows, cols);
  }
  void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows,
                     int64_t cols) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(rows * cols * 2);
    cpu::transpose_bytes(transposed, codes, rows, cols);
  }

  void update_delayed_scaling(const ScalingSlots& slots, int first, int count, int margin,
                              AmaxComputeAlgo algo) override {
    const HostOpScope op(OpKind::Cast);
    const int64_t H = slots.history_len;
    for (int i = first; i < first + count; ++i) {
      fp8lm::update_delayed_scaling(slots.amax_history + i * H, H, slots.fp8_max[i], margin,
                                    algo == AmaxComputeAlgo::MostRecent, slots.scale[i],
                                    slots.scale_inv[i]);
    }
  }
  void scale_from_amax(float* scale, float* scale_inv, const float* amax, float fp8_max,
                       int margin) override {
    const HostOpScope op(OpKind::Cast);
    *scale = compute_scale(*amax, fp8_max, margin, 1.0f);
    *scale_inv = 1.0f / *scale;
  }

  void attention_forward(const AttentionShape& a, float* out, float* lse,
                         const float* qkv) override {
    const HostOpScope op(OpKind::Attention);
    // Flash style: q, k, v read once per query block, the output written once; no T x T scores.
    count_traffic(a.B * a.T * (QkvLayout(a).row + a.C) * 4 + a.B * a.H * a.T * 4);
    if (a.bf16) return cpu::attention_forward_bf16(out, lse, qkv, a.B, a.T, a.C, a.H, a.Hkv);
    cpu::attention_forward(out, lse, qkv, a.B, a.T, a.C, a.H, a.Hkv);
  }
  void attention_backward(const AttentionShape& a, float* dqkv, const float* dout, const float* qkv,
                          const float* out, const float* lse) override {
    const HostOpScope op(OpKind::Attention);
    // qkv, out, dout in; dqkv out
    count_traffic(a.B * a.T * (2 * QkvLayout(a).row + 2 * a.C) * 4 + a.B * a.H * a.T * 4);
    if (a.bf16) {
      return cpu::attention_backward_bf16(dqkv, dout, qkv, out, lse, a.B, a.T, a.C, a.H, a.Hkv);
    }
    cpu::attention_backward(dqkv, dout, qkv, out, lse, a.B, a.T, a.C, a.H, a.Hkv);
  }
  void attention_backward_bf16_qkv(const AttentionShape& a, float* dqkv, const float* dout,
                                   const bf16_t* qkv, float* work, const float* out,
                                   const float* lse) override {
    if (!a.bf16) return Backend::attention_backward_bf16_qkv(a, dqkv, dout, qkv, work, out, lse);
    const HostOpScope op(OpKind::Attention);
    count_traffic(a.B * a.T * (QkvLayout(a).row * 6 + 2 * a.C * 4) + a.B * a.H * a.T * 4);
    cpu::attention_backward_bf16(dqkv, dout, qkv, out, lse, a.B, a.T, a.C, a.H, a.Hkv);
  }
  void attention_forward_unfused(const AttentionShape& a, float* out, float* probs,
                                 const float* qkv) override {
    const HostOpScope op(OpKind::Attention);
    // Head-major copies of q, k, v (read, written, read), the scores written and read by
    // softmax and read again by P·V, the output scattered back.
    count_traffic(a.B * a.T * a.C * 4 * 10 + a.B * a.H * a.T * a.T * 4 * 4);
    cpu::attention_forward_unfused(out, probs, qkv, a.B, a.T, a.C, a.H, a.Hkv);
  }
  void attention_backward_unfused(const AttentionShape& a, float* dqkv, const float* dout,
                                  const float* qkv, const float* probs) override {
    const HostOpScope op(OpKind::Attention);
    count_traffic(a.B * a.T * a.C * 4 * 16 + a.B * a.H * a.T * a.T * 4 * 6);
    cpu::attention_backward_unfused(dqkv, dout, qkv, probs, a.B, a.T, a.C, a.H, a.Hkv);
  }
  void attention_decode(const AttentionShape& a, int64_t len, float* out, const float* q,
                        const float* k_cache, const float* v_cache) override {
    const HostOpScope op(OpKind::Attention);
    // the cached keys and values; q in, out
    count_traffic(a.B * len * QkvLayout(a).Ckv * 8 + a.B * a.C * 8);
    cpu::attention_decode(out, q, k_cache, v_cache, a.B, a.T, len, a.C, a.H, a.Hkv);
  }
  void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
            int64_t hd, float theta, bool inverse) override {
    const HostOpScope op(OpKind::Attention);
    count_traffic(rows * heads * hd * 8);
    cpu::rope(x, rows, T, pos0, stride, heads, hd, theta, inverse);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t B, int64_t T, int64_t C) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(B * T * C * 12);
    cpu::embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(B * T * C * 20);
    cpu::embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  void softmax_cross_entropy_rows(float* dlogits, float* losses, const float* logits,
                                  const int32_t* targets, int64_t rows, int64_t V,
                                  float grad_scale) override {
    const HostOpScope op(OpKind::Loss);
    count_traffic(rows * V * 8);
    cpu::softmax_cross_entropy(dlogits, losses, logits, targets, rows, V, grad_scale);
  }
  void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* table, int n,
                 int64_t total) override {
    const HostOpScope op(OpKind::Optimizer);
    count_traffic(total * 4);  // every gradient read
    cpu::grad_norm(norm, clip, max_norm, table, n);
  }
  void adamw_step(const AdamWTensor* table, int n, int64_t total, const AdamWHyper& h,
                  const float* grad_scale, const StepDecision* decision) override {
    const HostOpScope op(OpKind::Optimizer);
    int64_t copies = 0;  // BF16 copies of the new weights written in the same pass
    for (int k = 0; k < n; ++k) copies += table[k].param16 != nullptr ? table[k].n : 0;
    count_traffic(total * 28 + copies * 2);  // w, m, v read and written; g read
    cpu::adamw_step(table, n, h, grad_scale == nullptr ? 1.0f : *grad_scale, decision);
  }
  void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                   const float* bias_corrections) override {
    const HostOpScope op(OpKind::Optimizer);
    cpu::decide_step(d, losses, rows, norm, bias_corrections);
  }
  void argmax_rows(int32_t* out, const float* logits, int64_t rows, int64_t V) override {
    const HostOpScope op(OpKind::Loss);
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = logits + r * V;
      out[r] = static_cast<int32_t>(std::max_element(row, row + V) - row);
    }
  }
  float softmax_cross_entropy_unfused(float* dlogits, float* probs, const float* logits,
                                      const int32_t* targets, int64_t rows, int64_t V,
                                      float grad_scale) override {
    const HostOpScope op(OpKind::Loss);
    count_traffic(rows * V * 16);  // logits -> probs, then probs -> dlogits
    return cpu::softmax_cross_entropy_unfused(dlogits, probs, logits, targets, rows, V, grad_scale);
  }
  void accumulate_into_bf16(bf16_t* acc, const float* x, int64_t n) override {
    const HostOpScope op(OpKind::Elementwise);
    count_traffic(n * 8);
    cpu::accumulate_into_bf16(acc, x, n);
  }
  void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(block_cast_traffic(c, out));
    fp8lm::block_cast(c, out, x, rht_work(c.grid, block_cast_writes_transform(c, out)));
  }
  void block_cast_pair(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                       const BlockCastOut& col_out, const float* x) override {
    const HostOpScope op(OpKind::Cast);
    count_traffic(block_cast_pair_traffic(row, row_out, col, col_out));
    // One tensor's casts, one after the other where either writes its transform: one buffer.
    const bool written =
        block_cast_writes_transform(row, row_out) || block_cast_writes_transform(col, col_out);
    fp8lm::block_cast_pair(row, row_out, col, col_out, x, rht_work(col.grid, written));
  }

 private:
  // Where a cast writes its Hadamard transform for its statistics to read (`written`); none
  // otherwise (the transform then stays in registers).
  static float* rht_work(const BlockGrid& g, bool written) {
    if (!written) return nullptr;
    thread_local std::vector<float> work;
    return grown(work, static_cast<size_t>(g.rows * g.cols));
  }
};

}  // namespace

Backend& cpu_backend() {
  static CpuBackend backend;
  return backend;
}

}  // namespace fp8lm
