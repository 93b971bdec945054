#pragma once
// One backend per device: the ops modules call, over the descriptors of kernels/tensor.h, and
// the memory their pointers live in (host for the CPU, device for CUDA; ops run in order on
// the backend's stream). A module holds the Backend it was built on and never asks which
// device that is (docs/ARCHITECTURE.md). Sizes are elements.
//
// Each op has the contract of the CPU kernel of the same name (kernels/cpu/*.h), which is
// also what its reference twin checks; test_backend_ops runs one table of cases against the
// reference on every backend present. The CPU backend counts the bytes every op moves
// (kernels/traffic.h) so module code does not.
//
// An op a device lacks (FP8LM_OPTIONAL_OPS: the unfused twins and BF16 gradient accumulation,
// which only the CPU has) is refused by name:
// supports(op) says which a backend has, require() is asked once when a model is placed on a
// backend (so a run that needs a missing op fails before its first step), and the base class's
// version of each throws the same Error "<op> is not available on <backend>".
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/bf16.h"
#include "fp8/block_cast.h"
#include "fp8/recipe.h"
#include "kernels/tensor.h"
#include "kernels/types.h"

namespace fp8lm {

// The ops not every backend has: X(enumerator, what it is, in the words of the refusal).
#define FP8LM_OPTIONAL_OPS(X)                                                                 \
  X(UnfusedAttention, "unfused attention (--no-fusion; the CPU has it)")                      \
  X(UnfusedLoss, "the unfused loss (--no-fusion; the CPU has it)")                            \
  X(Bf16GradAccumulation, "BF16 gradient accumulation (--fp8-weights' gradients on the CPU)") \
  X(BlockCast, "block-scaled casts (the block, mxfp8 and nvfp4 recipes)")

enum class OptionalOp : uint8_t {
#define FP8LM_OPTIONAL_OP_ENUMERATOR(e, what) e,
  FP8LM_OPTIONAL_OPS(FP8LM_OPTIONAL_OP_ENUMERATOR)
#undef FP8LM_OPTIONAL_OP_ENUMERATOR
};
std::string_view optional_op_name(OptionalOp op);

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0"
  // Whether the host can address this backend's memory directly (the CPU's).
  virtual bool host_memory() const { return false; }
  // Whether the producers (norm_forward, bias_act_forward) take a block-scaled ProducerOut,
  // casting each stripe of rows as they make it (the CPU's); elsewhere the producer writes FP32
  // and block_cast_pair casts it.
  virtual bool produces_block_casts() const { return false; }
  // Whether this backend has an optional op (FP8LM_OPTIONAL_OPS).
  virtual bool supports(OptionalOp op) const = 0;
  // Error "<op> is not available on <backend>" for the first of ops this backend lacks.
  void require(const std::vector<OptionalOp>& ops) const;

  // --- a step as one graph (CUDA graphs, issue 34) ---
  // The work queued from begin_graph() to launch_graph() is captured, not run, then launched
  // whole: the device runs it without waiting for the host to queue each op. The host code in
  // between runs as ever; it may not read backend memory back (nothing of the capture has run)
  // nor free memory for good (release() waits for the launch). begin_graph() is false where the
  // backend has no graphs (the CPU) or cannot capture now (ops being profiled); abandon_graph()
  // ends a capture whose step failed, running none of it.
  virtual bool begin_graph() { return false; }
  virtual void launch_graph() {}
  virtual void abandon_graph() {}

  // --- memory ---
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p) = 0;
  virtual void upload(void* dst, const void* host, size_t bytes) = 0;
  virtual void download(void* host, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // The same when *flag (backend memory) is non-zero: a decision made on the backend, such as
  // a skipped step's roll-back, without a read.
  virtual void copy_if(void* dst, const void* src, size_t bytes, const int32_t* flag) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  // rows rows of row_bytes each, from src (rows src_pitch bytes apart) to dst (dst_pitch).
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch,
                         size_t row_bytes, size_t rows) = 0;

  // --- GEMM: C = alpha * op(A) · op(B) + beta * C, FP8 operands with their scale_invs ---
  virtual void gemm(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                    const GemmOperand& A, const GemmOperand& B, float beta, float* C) = 0;
  // C = alpha * op(A) · op(B), then add_bias(C, bias, M, N): a Linear's forward. This default
  // makes the two calls; a backend may add the bias in a pass it makes anyway (the CPU's alpha
  // pass after a scaled product), with the same bits.
  virtual void gemm_bias(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                         const GemmOperand& A, const GemmOperand& B, const float* bias, float* C);

  // --- producers: the output's dtype picks the fused cast (kernels/tensor.h) ---
  // Normalizes x (or, with r, s = x + r, written to s) over rows of n.C, keeping stats.
  virtual void norm_forward(const NormParams& n, const NormStats& stats, ProducerOut out, float* s,
                            const float* x, const float* r, int64_t rows) = 0;
  // dx, dgamma, dbeta +=.
  virtual void norm_backward(const NormParams& n, const NormStats& stats, float* dx, float* dgamma,
                             float* dbeta, const float* dy, const float* x, int64_t rows) = 0;
  // h += bias (bias null: none, the unfused twin's order), out = act(h). F is the activation's
  // width; h has activation_input_width(act, F) columns.
  virtual void bias_act_forward(ProducerOut out, float* h, const float* bias, Activation act,
                                int64_t rows, int64_t F) = 0;
  // dh = act'(h) * dy, overwritten.
  virtual void act_backward(float* dh, const float* dy, const float* h, Activation act,
                            int64_t rows, int64_t F) = 0;
  // The same with h kept in BF16 (nn/saved_activation.h), widened exactly: act_backward's bits
  // on bf16_to_fp32(h). This default widens h into work (FP32, h's size) first; a backend that
  // widens each row as it reads it leaves work alone.
  virtual void act_backward_bf16(float* dh, const float* dy, const bf16_t* h, float* work,
                                 Activation act, int64_t rows, int64_t F);

  // --- elementwise ---
  virtual void add_bias(float* y, const float* bias, int64_t rows, int64_t C) = 0;
  virtual void bias_backward(float* dbias, const float* dy, int64_t rows, int64_t C) = 0;
  // bias_backward, and dy16 = fp32_to_bf16(dy) (a BF16 GEMM's operand); this default makes them
  // one after the other, a backend may make both in one pass over dy.
  virtual void bias_backward_bf16(float* dbias, bf16_t* dy16, const float* dy, int64_t rows,
                                  int64_t C);
  virtual void add(float* y, const float* a, const float* b, int64_t n) = 0;
  virtual void fp32_to_bf16(bf16_t* y, const float* x, int64_t n) = 0;
  virtual void bf16_to_fp32(float* y, const bf16_t* x, int64_t n) = 0;
  // out.data = cast(x * *out.scale); amax and counters accumulated into out's.
  virtual void quantize(const Fp8Out& out, const float* x, int64_t n) = 0;
  // *amax = max(*amax, max|x|), NaN ignored.
  virtual void absmax(float* amax, const float* x, int64_t n) = 0;
  // TE's cast_transpose: quantize's codes of x [rows, cols] into out.data (skipped where null)
  // and, from the same read of x, as [cols, rows] into transposed; statistics as quantize.
  virtual void quantize_transposed(const Fp8Out& out, uint8_t* transposed, const float* x,
                                   int64_t rows, int64_t cols) = 0;
  // transposed [cols, rows] = codes [rows, cols].
  virtual void transpose_fp8(uint8_t* transposed, const uint8_t* codes, int64_t rows,
                             int64_t cols) = 0;

  // --- FP8 scaling state (ScalingSlots, kernels/tensor.h) ---
  // Delayed scaling of slots [first, first + count), each as fp8/scaling.h's
  // update_delayed_scaling (the CPU's bits on every backend).
  virtual void update_delayed_scaling(const ScalingSlots& slots, int first, int count, int margin,
                                      AmaxComputeAlgo algo) = 0;
  // Current scaling: *scale = compute_scale(*amax, fp8_max, margin, 1), *scale_inv = 1 / *scale.
  virtual void scale_from_amax(float* scale, float* scale_inv, const float* amax, float fp8_max,
                               int margin) = 0;

  // --- attention over packed qkv [B, T, C + 2*Ckv] (AttentionShape; kernels/cpu/attention.h) ---
  virtual void attention_forward(const AttentionShape& a, float* out, float* lse,
                                 const float* qkv) = 0;
  virtual void attention_backward(const AttentionShape& a, float* dqkv, const float* dout,
                                  const float* qkv, const float* out, const float* lse) = 0;
  // The same with qkv kept in BF16 (nn/saved_activation.h): attention_backward's bits on
  // bf16_to_fp32(qkv). This default widens qkv into work (FP32, qkv's size) first; a backend
  // whose kernels read BF16 leaves work alone.
  virtual void attention_backward_bf16_qkv(const AttentionShape& a, float* dqkv, const float* dout,
                                           const bf16_t* qkv, float* work, const float* out,
                                           const float* lse);
  // One new query per sequence against a KV cache [B, a.T, Ckv] holding len positions.
  virtual void attention_decode(const AttentionShape& a, int64_t len, float* out, const float* q,
                                const float* k_cache, const float* v_cache) = 0;
  // Rotary position embeddings in place (kernels/cpu/rope.h): the first `heads` heads of hd
  // values of each row of x (rows `stride` floats apart), row r at position pos0 + r % T.
  virtual void rope(float* x, int64_t rows, int64_t T, int64_t pos0, int64_t stride, int64_t heads,
                    int64_t hd, float theta, bool inverse) = 0;

  // --- embedding and loss ---
  virtual void embedding_forward(float* out, const int32_t* tokens, const float* wte,
                                 const float* wpe, int64_t B, int64_t T, int64_t C) = 0;
  virtual void embedding_backward(float* dwte, float* dwpe, const float* dout,
                                  const int32_t* tokens, int64_t B, int64_t T, int64_t C) = 0;
  // Fused softmax + cross-entropy, dlogits (may alias logits) overwritten, with nothing read
  // back (no wait for the device): each row's loss into losses[rows] (backend memory), for the
  // caller to average with mean_loss (kernels/loss.h) when it next reads, so every backend
  // reports the same mean for the same losses. The caller has checked the targets
  // (check_targets).
  virtual void softmax_cross_entropy_rows(float* dlogits, float* losses, const float* logits,
                                          const int32_t* targets, int64_t rows, int64_t V,
                                          float grad_scale) = 0;
  // out[r] = the first index of the largest logit of row r: greedy decoding.
  virtual void argmax_rows(int32_t* out, const float* logits, int64_t rows, int64_t V) = 0;

  // --- the optimizer ---
  // Over a table of tensors in backend memory (TE's multi-tensor apply, kernels/adamw_ops.h's
  // bits on every backend): *norm = the global gradient norm and *clip (optional) its clipping
  // factor for max_norm; AdamW with each gradient times *grad_scale, writing the new values'
  // BF16 copies where an entry has one (AdamWTensor::param16). total: the sum of the tensors' n.
  virtual void grad_norm(float* norm, float* clip, float max_norm, const AdamWTensor* table, int n,
                         int64_t total) = 0;
  // With a decision (null: none), AdamW changes nothing when it skips and takes its bias
  // corrections otherwise.
  virtual void adamw_step(const AdamWTensor* table, int n, int64_t total, const AdamWHyper& h,
                          const float* grad_scale, const StepDecision* decision) = 0;
  // The step's decision (adamw::decide): skipped when any of losses[rows] or *norm is not
  // finite; bias_corrections: the host's table, [2t] and [2t + 1] for step t.
  virtual void decide_step(StepDecision* d, const float* losses, int64_t rows, const float* norm,
                           const float* bias_corrections) = 0;

  // --- ops not every device has ---
  // --no-fusion's twins: the T x T probabilities stored, the softmax stored.
  virtual void attention_forward_unfused(const AttentionShape& a, float* out, float* probs,
                                         const float* qkv);
  virtual void attention_backward_unfused(const AttentionShape& a, float* dqkv, const float* dout,
                                          const float* qkv, const float* probs);
  virtual float softmax_cross_entropy_unfused(float* dlogits, float* probs, const float* logits,
                                              const int32_t* targets, int64_t rows, int64_t V,
                                              float grad_scale);
  // acc (BF16) += x: --fp8-weights' BF16 gradients.
  virtual void accumulate_into_bf16(bf16_t* acc, const float* x, int64_t n);
  // A block-scaled recipe's cast of x (fp8/block_cast.h): codes, block scales and the GEMM's
  // exact BF16 operand, whose scale_inv is *out.tensor_scale_inv.
  virtual void block_cast(const BlockCast& c, const BlockCastOut& out, const float* x);
  // A tensor's row-wise and column-wise casts (fp8/block_cast.h, block_cast_pair): by default
  // the two casts one after the other.
  virtual void block_cast_pair(const BlockCast& row, const BlockCastOut& row_out,
                               const BlockCast& col, const BlockCastOut& col_out, const float* x);
  // Whether gemm multiplies this scheme's codes and block scales itself when an operand carries
  // them (GemmOperand::block): Float8BlockScaling on Hopper (kernels/cuda/block_gemm.h). Else
  // block-scaled GEMMs are BF16 GEMMs of the exactly decoded operands ("emulated").
  virtual bool block_scaled_gemms(BlockScheme) const { return false; }
  // Whether FP8 GEMMs take their operands K-major only (C = A · Bᵀ, cuBLASLt's one FP8 layout):
  // gemm then copies every other layout first, so modules pass operands already so, made once
  // per tensor (quantize_transposed) and per weight version.
  virtual bool fp8_gemms_want_tn() const { return false; }
  // Whether FP8 GEMMs multiply the codes' values as BF16 (the CPU's, gemm.h): casts then also
  // write those values beside the codes (Fp8Out::decoded) for GEMMs to take
  // (GemmOperand::decoded), made once per cast instead of once per GEMM that reads it.
  virtual bool fp8_gemms_take_decoded() const { return false; }

 protected:
  [[noreturn]] void refuse(OptionalOp op) const;
};

// The host's backend (one per process; threads per the OpenMP settings).
Backend& cpu_backend();

}  // namespace fp8lm
