// The CUDA backend: device memory (cudaMalloc) and the kernels of kernels/cuda, all on one stream
// of the device, in the order they are called (a stream of its own, which can capture a step as
// a graph: step_graph.h; blocking, so that the legacy default stream's copies wait for it). Every
// entry point makes the backend's device current for its duration (DeviceGuard), whatever the
// caller's current device is, and while profiling is on times its work as one kind of op (OpScope,
// op_profile.h).
#include <cuda_runtime_api.h>

#include <atomic>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "fp8/block_cast.h"
#include "fp8/block_stats.h"
#include "kernels/backend.h"
#include "kernels/cuda/activations.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/block_cast.h"
#include "kernels/cuda/block_gemm.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/device_guard.h"
#include "kernels/cuda/device_query.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/loss_embedding.h"
#include "kernels/cuda/norms.h"
#include "kernels/cuda/op_profile.h"
#include "kernels/cuda/optimizer.h"
#include "kernels/cuda/quantize.h"
#include "kernels/cuda/scaling.h"
#include "kernels/cuda/step_decision.h"
#include "kernels/cuda/step_graph.h"
#include "kernels/cuda/upload_staging.h"

namespace fp8lm::cuda {
namespace {

std::atomic<int64_t> g_fp8_operand_copies{0};  // fp8_operand_copies()

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device) : device_(device) {
    const DeviceGuard guard(device_);
    FP8LM_CUDA_CHECK(cudaStreamCreate(&stream_));
  }
  std::string name() const override { return "cuda:" + std::to_string(device_); }
  // Block casts; the unfused twins and BF16 gradient accumulation are the CPU's alone.
  bool supports(OptionalOp op) const override { return op == OptionalOp::BlockCast; }

  void* allocate(size_t bytes) override {
    const DeviceGuard guard(device_);
    void* p = nullptr;
    FP8LM_CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
  }
  void release(void* p) override {
    const DeviceGuard guard(device_, std::nothrow);
    free_device(p);
  }

  bool begin_graph() override {
    if (profiling_ops()) return false;  // the op timer's events cannot be read from a graph
    const DeviceGuard guard(device_);
    graph_.begin(stream_);
    return true;
  }
  void launch_graph() override {
    const DeviceGuard guard(device_);
    graph_.launch();
    staging_.after_capture(stream_);
  }
  void abandon_graph() override {
    const DeviceGuard guard(device_, std::nothrow);
    graph_.abandon();
    staging_.after_capture(stream_);
  }
  void upload(void* dst, const void* host, size_t bytes) override {
    const OpScope entry(device_, OpKind::Copy, stream_);
    if (bytes) staging_.upload(dst, host, bytes, stream_);
  }
  void download(void* host, const void* src, size_t bytes) override {
    const OpScope entry(device_, OpKind::Copy, stream_);
    if (bytes) FP8LM_CUDA_CHECK(cudaMemcpy(host, src, bytes, cudaMemcpyDeviceToHost));
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    const OpScope entry(device_, OpKind::Copy, stream_);
    if (bytes) {
      FP8LM_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
    }
  }
  void copy_if(void* dst, const void* src, size_t bytes, const int32_t* flag) override {
    const OpScope entry(device_, OpKind::Copy, stream_);
    cuda::copy_if(dst, src, bytes, flag, stream_);
  }
  void zero(void* p, size_t bytes) override {
    const OpScope entry(device_, OpKind::Copy, stream_);
    if (bytes) FP8LM_CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, stream_));
  }

  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes,
                 size_t rows) override {
    const OpScope entry(device_, OpKind::Copy, stream_);
    if (rows == 0 || row_bytes == 0) return;
    FP8LM_CUDA_CHECK(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows,
                                       cudaMemcpyDeviceToDevice, stream_));
  }

  // cuBLASLt takes FP8 only as C = A · Bᵀ with M, N and K multiples of 16 (kernels/cuda/
  // gemm.h). Other FP8 layouts get transposed copies of their codes and other sizes zero-padded
  // ones (code 0 is +0 in both formats, so padding adds nothing), so modules may call every
  // layout and size the CPU takes. Linear avoids the copies as TE does (fp8_gemms_want_tn): it
  // casts into both layouts at once and passes "TN" operands.
  void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha, const GemmOperand& A,
            const GemmOperand& B, float beta, float* C) override {
    const OpScope entry(device_, OpKind::Gemm, stream_);
    if (A.block && B.block &&
        gemm_block_scaled(ta, tb, M, N, K, alpha, *A.block, *B.block, beta, C))
      return;
    gemm_decoded(ta, tb, M, N, K, alpha, decoded(A, decoded_a_), decoded(B, decoded_b_), beta, C);
  }

  bool block_scaled_gemms(BlockScheme scheme) const override {
    const DeviceGuard guard(device_);
    return scheme == BlockScheme::Fp8Block && cuda::block_scaled_gemm_available();
  }
  bool fp8_gemms_want_tn() const override { return true; }

  void norm_forward(const NormParams& n, const NormStats& st, ProducerOut out, float* s,
                    const float* x, const float* r, int64_t rows) override {
    const OpScope entry(device_, OpKind::Norm, stream_);
    cuda::norm_forward(n.kind, out, s, st.mean, st.rstd, x, r, n.gamma, n.beta, rows, n.C, n.eps,
                       stream_);
  }
  void norm_backward(const NormParams& n, const NormStats& st, float* dx, float* dgamma,
                     float* dbeta, const float* dy, const float* x, int64_t rows) override {
    const OpScope entry(device_, OpKind::Norm, stream_);
    cuda::norm_backward(n.kind, dx, dgamma, dbeta, dy, x, n.gamma, st.mean, st.rstd, rows, n.C,
                        stream_);
  }
  void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act, int64_t rows,
                        int64_t F) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    cuda::bias_act_forward(out, h, bias, act, rows, F, stream_);
  }
  void act_backward(float* dh, const float* dy, const float* h, Activation act, int64_t rows,
                    int64_t F) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    cuda::act_backward(dh, dy, h, act, rows, F, stream_);
  }

  void add_bias(float* y, const float* bias, int64_t rows, int64_t C) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    cuda::add_bias(y, bias, rows, C, stream_);
  }
  void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    cuda::bias_backward(dbias, dy, rows, C, stream_);
  }
  void add(float* y, const float* a, const float* b, int64_t n) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    cuda::add(y, a, b, n, stream_);
  }
  void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::fp32_to_bf16(y, x, n, stream_);
  }
  void bf16_to_fp32(float* y, const bf16_t* x, int64_t n) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::bf16_to_fp32(y, x, n, stream_);
  }
  void quantize(const Fp8Out& out, const float* x, int64_t n) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::quantize(out, x, n, stream_);
  }
  void absmax(float* amax, const float* x, int64_t n) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::absmax(amax, x, n, stream_);
  }
  void quantize_transposed(const Fp8Out& out, uint8_t* transposed, const float* x, int64_t rows,
                           int64_t cols) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::quantize_transposed(out, transposed, x, rows, cols, stream_);
  }
  void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows,
                     int64_t cols) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::transpose_fp8(transposed, codes, rows, cols, stream_);
  }
  void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    check_block_cast(c);
    const size_t work = cuda::block_cast_work_floats(c);
    if (block_work_.size() < work) block_work_.resize(work);
    cuda::block_cast(c, out, x, block_work_.data(), stream_);
    if (!out.stats) return;
    // The statistics are the CPU's (fp8/block_stats.h), on host copies: the snapshot steps only.
    const auto n = static_cast<size_t>(c.grid.rows * c.grid.cols);
    std::vector<float> hx(n);
    std::vector<uint8_t> codes(n), scales(block_scale_bytes(c));
    float tsi = 1.0f;
    download(hx.data(), c.rht ? block_work_.data() : x, n * sizeof(float));  // after the RHT
    const uint8_t* row_major = out.codes;
    if (out.codes_transposed) {  // [cols, rows]: the statistics read them as the tensor is
      t_.resize(n);
      cuda::transpose_fp8(t_.data(), out.codes, c.grid.cols, c.grid.rows, stream_);
      row_major = t_.data();
    }
    download(codes.data(), row_major, n);
    download(scales.data(), out.scales, scales.size());
    download(&tsi, out.tensor_scale_inv, sizeof(float));
    *out.stats = block_scale_stats(c, hx.data(), codes.data(), scales.data(), tsi);
  }

  // The row-wise and column-wise FP8 casts of one tensor in one kernel where it takes them
  // (cuda::block_cast_pair); statistics (snapshot steps) and NVFP4 make the two casts.
  void block_cast_pair(const BlockCast& row, const BlockCastOut& row_out, const BlockCast& col,
                       const BlockCastOut& col_out, const float* x) override {
    {
      const OpScope entry(device_, OpKind::Cast, stream_);
      check_block_cast(row);
      check_block_cast(col);
      if (!row_out.stats && !col_out.stats &&
          cuda::block_cast_pair(row, row_out, col, col_out, x, stream_))
        return;
    }
    Backend::block_cast_pair(row, row_out, col, col_out, x);
  }

  void update_delayed_scaling(const ScalingSlots& slots, int first, int count, int margin,
                              AmaxComputeAlgo algo) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::update_delayed_scaling(slots, first, count, margin, algo, stream_);
  }
  void scale_from_amax(float* scale, float* scale_inv, const float* amax, float fp8_max,
                       int margin) override {
    const OpScope entry(device_, OpKind::Cast, stream_);
    cuda::scale_from_amax(scale, scale_inv, amax, fp8_max, margin, stream_);
  }

  void attention_forward(const AttentionShape& a, float* out, float* lse,
                         const float* qkv) override {
    const OpScope entry(device_, OpKind::Attention, stream_);
    cuda::attention_forward(out, lse, qkv, a.B, a.T, a.C, a.H, a.Hkv, stream_);
  }
  void attention_backward(const AttentionShape& a, float* dqkv, const float* dout, const float* qkv,
                          const float* out, const float* lse) override {
    const OpScope entry(device_, OpKind::Attention, stream_);
    cuda::attention_backward(dqkv, dout, qkv, out, lse, a.B, a.T, a.C, a.H, a.Hkv, stream_);
  }
  void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
            int64_t hd, float theta, bool inverse) override {
    const OpScope entry(device_, OpKind::Attention, stream_);
    cuda::rope(x, rows, T, pos0, stride, heads, hd, theta, inverse, stream_);
  }

  void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* table, int n,
                 int64_t total) override {
    const OpScope entry(device_, OpKind::Optimizer, stream_);
    norm_scratch_.resize(cuda::grad_norm_scratch_bytes(total));
    cuda::grad_norm(norm, clip, max_norm, table, n, total, norm_scratch_.data(), stream_);
  }
  void adamw_step(const AdamWTensor* table, int n, int64_t total, const AdamWHyper& h,
                  const float* grad_scale, const StepDecision* decision) override {
    const OpScope entry(device_, OpKind::Optimizer, stream_);
    cuda::adamw_step(table, n, total, h, grad_scale, decision, stream_);
  }
  void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                   const float* bias_corrections) override {
    const OpScope entry(device_, OpKind::Optimizer, stream_);
    cuda::decide_step(d, losses, rows, norm, bias_corrections, stream_);
  }

  void attention_decode(const AttentionShape& a, int64_t len, float* out, const float* q,
                        const float* k_cache, const float* v_cache) override {
    const OpScope entry(device_, OpKind::Attention, stream_);
    cuda::attention_decode(out, q, k_cache, v_cache, a.B, a.T, len, a.C, a.H, a.Hkv, stream_);
  }

  void embedding_forward(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                         int64_t B, int64_t T, int64_t C) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    cuda::embedding_forward(out, tokens, wte, wpe, B, T, C, stream_);
  }
  void embedding_backward(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                          int64_t B, int64_t T, int64_t C) override {
    const OpScope entry(device_, OpKind::Elementwise, stream_);
    sort_scratch_.resize(cuda::embedding_backward_scratch_bytes(B * T));
    cuda::embedding_backward(dwte, dwpe, dout, tokens, B, T, C, sort_scratch_.data(), stream_);
  }
  void argmax_rows(int32_t* out, const float* logits, int64_t rows, int64_t V) override {
    const OpScope entry(device_, OpKind::Loss, stream_);
    cuda::argmax_rows(out, logits, rows, V, stream_);
  }
  void softmax_cross_entropy_rows(float* dlogits, float* losses, const float* logits,
                                  const int32_t* targets, int64_t rows, int64_t V,
                                  float grad_scale) override {
    const OpScope entry(device_, OpKind::Loss, stream_);
    cuda::softmax_cross_entropy(dlogits, losses, nullptr, logits, targets, rows, V, grad_scale,
                                stream_);
  }

 private:
  // gemm past the block-scaled GEMM: operands carrying a block-scaled cast's tensor scales
  // (their data decoded), FP8 operands, and the rest.
  void gemm_decoded(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const GemmOperand& A, const GemmOperand& B, float beta, float* C) {
    if (A.type == DType::BF16 && (A.scale_inv || B.scale_inv)) {
      // A block-scaled recipe's operands (fp8/block_cast.h) with their tensor scales, which
      // cuBLASLt applies to FP8 operands only: the product first, then scaled into C.
      c_.resize(size_t(M * N));
      cuda::gemm(ta, tb, M, N, K, alpha, {A.data, A.type}, {B.data, B.type}, 0.0f, c_.data(),
                 stream_);
      return cuda::product_scaled_into(C, c_.data(), M * N, A.scale_inv, B.scale_inv, beta,
                                       stream_);
    }
    if (!is_fp8(A.type) || !is_fp8(B.type)) {
      return cuda::gemm(ta, tb, M, N, K, alpha, A, B, beta, C, stream_);
    }
    fp8_tn_product(
        ta, tb, M, N, K, A.data, B.data, beta, C,
        [&](const uint8_t* a, const uint8_t* b, int64_t M16, int64_t N16, int64_t K16, float* c) {
          cuda::gemm(Trans::N, Trans::T, M16, N16, K16, alpha, {a, A.type, A.scale_inv},
                     {b, B.type, B.scale_inv}, beta, c, stream_);
          return true;
        });
  }

  // x, or where a block-scaled cast kept only its codes (Linear on a backend whose GEMMs take
  // them) x with its BF16 operand decoded into buf: what a GEMM that declined the codes reads.
  GemmOperand decoded(const GemmOperand& x, DeviceBuffer<bf16_t>& buf) {
    if (x.data || !x.block) return x;
    const BlockGrid& g = x.block->cast.grid;
    buf.resize(size_t(g.rows * g.cols));
    cuda::block_decode_bf16(*x.block, buf.data(), stream_);
    GemmOperand d = x;
    d.data = buf.data();
    return d;
  }

  // C = alpha op(A) op(B) + beta C through an FP8 product in cuBLASLt's TN form: each operand's
  // codes as [outer, K] padded to multiples of 16 (fp8_rows), the product into C, or into c_
  // where padded. run(a, b, M16, N16, K16, c) forms c = alpha a bᵀ + beta c, or returns false
  // having done nothing (C is then unchanged and so is the result).
  template <class Run>
  bool fp8_tn_product(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, const void* A,
                      const void* B, float beta, float* C, Run run) {
    const auto up16 = [](int64_t n) { return (n + 15) / 16 * 16; };
    const int64_t M16 = up16(M), N16 = up16(N), K16 = up16(K);
    const uint8_t* a = fp8_rows(A, ta == Trans::T, M, K, M16, K16, a_);
    const uint8_t* b = fp8_rows(B, tb == Trans::N, N, K, N16, K16, b_);
    float* c = C;
    const size_t row = size_t(N) * sizeof(float), row16 = size_t(N16) * sizeof(float);
    if (M16 != M || N16 != N) {
      c_.resize(size_t(M16 * N16));
      c = c_.data();
      if (beta != 0.0f) copy_rows(c, row16, C, row, row, size_t(M));
    }
    if (!run(a, b, M16, N16, K16, c)) return false;
    if (c != C) copy_rows(C, row, c, row16, row, size_t(M));
    return true;
  }

  // Float8BlockScaling's GEMM on cuBLASLt's block-scale modes (kernels/cuda/block_gemm.h): the
  // codes in TN form, their grids laid out as cuBLASLt reads them. False, having done nothing,
  // where the blocks do not run along K in 128s, both are 2D, or cuBLASLt offers no algorithm.
  // The operands' tensor scales are 1 under this scheme (fp8/block_cast.h), so none is applied.
  bool gemm_block_scaled(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const BlockCodes& A, const BlockCodes& B, float beta, float* C) {
    cuda::BlockScaleGrid ga, gb;
    if (M == 0 || N == 0 || K == 0 || !block_scaled_gemms(A.cast.scheme) ||
        !scale_grid(A, ta == Trans::T, &ga) || !scale_grid(B, tb == Trans::N, &gb) ||
        (ga.two_d && gb.two_d) || (A.cast.format == DType::E5M2 && B.cast.format == DType::E5M2))
      return false;
    // Codes stored transposed are read with the other flag: op(X) = op'(Xᵀ).
    if (A.transposed) ta = ta == Trans::N ? Trans::T : Trans::N;
    if (B.transposed) tb = tb == Trans::N ? Trans::T : Trans::N;
    return fp8_tn_product(
        ta, tb, M, N, K, A.codes, B.codes, beta, C,
        [&](const uint8_t* a, const uint8_t* b, int64_t M16, int64_t N16, int64_t K16, float* c) {
          sa_.resize(size_t(cuda::block_scale_floats(ga, M16)));
          sb_.resize(size_t(cuda::block_scale_floats(gb, N16)));
          cuda::lay_out_block_scales(sa_.data(), ga, M16, stream_);
          cuda::lay_out_block_scales(sb_.data(), gb, N16, stream_);
          return cuda::gemm_block_scaled(
              M16, N16, K16, alpha, {a, A.cast.format, sa_.data(), ga.two_d},
              {b, B.cast.format, sb_.data(), gb.two_d}, beta, c, stream_);
        });
  }

  // x's block scales read along the GEMM's K, which runs down x's rows (k_down_rows) or along
  // them: 1x128 blocks along K, or 128x128.
  static bool scale_grid(const BlockCodes& x, bool k_down_rows, cuda::BlockScaleGrid* out) {
    const BlockGrid& g = x.cast.grid;
    const int64_t k_block = k_down_rows ? g.block_rows : g.block_cols;
    const int64_t outer_block = k_down_rows ? g.block_cols : g.block_rows;
    if (x.cast.scheme != BlockScheme::Fp8Block || k_block != kFp8Block ||
        (outer_block != 1 && outer_block != kFp8Block))
      return false;
    out->scales = static_cast<const float*>(x.scales);
    out->two_d = outer_block == kFp8Block;
    out->k_blocks = k_down_rows ? g.grid_rows() : g.grid_cols();
    out->outer_blocks = k_down_rows ? g.grid_cols() : g.grid_rows();
    out->outer_stride = k_down_rows ? 1 : g.grid_cols();
    out->k_stride = k_down_rows ? g.grid_cols() : 1;
    return true;
  }

  // An FP8 operand's codes as [rows_p, cols_p] row-major (zero-padded), from data stored as
  // [rows, cols], or as [cols, rows] when transposed; data itself when that is already so.
  const uint8_t* fp8_rows(const void* data, bool transposed, int64_t rows, int64_t cols,
                          int64_t rows_p, int64_t cols_p, DeviceBuffer<uint8_t>& out) {
    const auto* codes = static_cast<const uint8_t*>(data);
    const bool padded = rows_p != rows || cols_p != cols;
    if (!transposed && !padded) return codes;
    ++g_fp8_operand_copies;
    out.resize(size_t(rows_p * cols_p));
    if (padded) out.zero(stream_);
    if (transposed) {
      uint8_t* dst = out.data();
      if (padded) {
        t_.resize(size_t(rows * cols));
        dst = t_.data();
      }
      cuda::transpose_fp8(dst, codes, cols, rows, stream_);  // [cols, rows] -> [rows, cols]
      codes = dst;
    }
    if (padded) {
      copy_rows(out.data(), size_t(cols_p), codes, size_t(cols), size_t(cols), size_t(rows));
    }
    return out.data();
  }
  int device_;
  cudaStream_t stream_ = nullptr;  // never destroyed: a backend lives until the process exits
  StepGraph graph_;
  UploadStaging staging_;
  DeviceBuffer<uint8_t> norm_scratch_, sort_scratch_;  // grad_norm's and the embedding sort's
  DeviceBuffer<uint8_t> a_, b_, t_;             // FP8 operands transposed or padded for cuBLASLt
  DeviceBuffer<float> block_work_;              // NVFP4 block casts: the RHT'd tensor and its amax
  DeviceBuffer<float> c_;                       // a padded product
  DeviceBuffer<bf16_t> decoded_a_, decoded_b_;  // block-scaled operands kept as codes only
  DeviceBuffer<float> sa_, sb_;                 // block scales laid out for cuBLASLt
};

}  // namespace

int64_t fp8_operand_copies() {
  return g_fp8_operand_copies.load();
}

Backend& backend(int device) {
  static std::mutex m;
  static std::map<int, std::unique_ptr<CudaBackend>> backends;
  const std::lock_guard lock(m);
  auto& b = backends[device];
  if (!b) b = std::make_unique<CudaBackend>(device);
  return *b;
}

}  // namespace fp8lm::cuda
