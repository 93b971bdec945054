#include "kernels/backend.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

std::string_view optional_op_name(OptionalOp op) {
  switch (op) {
#define FP8LM_OPTIONAL_OP_NAME(e, what) \
  case OptionalOp::e:                   \
    return what;
    FP8LM_OPTIONAL_OPS(FP8LM_OPTIONAL_OP_NAME)
#undef FP8LM_OPTIONAL_OP_NAME
  }
  return "?";
}

void Backend::refuse(OptionalOp op) const {
  throw Error(fmt::format("{} is not available on {}", optional_op_name(op), name()));
}

void Backend::require(const std::vector<OptionalOp>& ops) const {
  for (OptionalOp op : ops)
    if (!supports(op)) refuse(op);
}

void Backend::attention_forward_unfused(const AttentionShape&, float*, float*, const float*) {
  refuse(OptionalOp::UnfusedAttention);
}
void Backend::attention_backward_unfused(const AttentionShape&, float*, const float*, const float*,
                                         const float*) {
  refuse(OptionalOp::UnfusedAttention);
}
float Backend::softmax_cross_entropy_unfused(float*, float*, const float*, const int32_t*, int64_t,
                                             int64_t, float) {
  refuse(OptionalOp::UnfusedLoss);
}
void Backend::gemm_bias(Trans ta, Trans tb, int64_t M, int64_t N, int64_t K, float alpha,
                        const GemmOperand& A, const GemmOperand& B, const float* bias, float* C) {
  gemm(ta, tb, M, N, K, alpha, A, B, 0.0f, C);
  add_bias(C, bias, M, N);
}

void Backend::accumulate_into_bf16(bf16_t*, const float*, int64_t) {
  refuse(OptionalOp::Bf16GradAccumulation);
}
void Backend::act_backward_bf16(float* dh, const float* dy, const bf16_t* h, float* work,
                                Activation act, int64_t rows, int64_t F) {
  bf16_to_fp32(work, h, rows * activation_input_width(act, F));
  act_backward(dh, dy, work, act, rows, F);
}
void Backend::bias_backward_bf16(float* dbias, bf16_t* dy16, const float* dy, int64_t rows,
                                 int64_t C) {
  bias_backward(dbias, dy, rows, C);
  fp32_to_bf16(dy16, dy, rows * C);
}
void Backend::attention_backward_bf16_qkv(const AttentionShape& a, float* dqkv, const float* dout,
                                          const bf16_t* qkv, float* work, const float* out,
                                          const float* lse) {
  bf16_to_fp32(work, qkv, a.B * a.T * QkvLayout(a).row);
  attention_backward(a, dqkv, dout, work, out, lse);
}
void Backend::block_cast(const BlockCast&, const BlockCastOut&, const float*) {
  refuse(OptionalOp::BlockCast);
}
void Backend::block_cast_pair(const BlockCast& row, const BlockCastOut& row_out,
                              const BlockCast& col, const BlockCastOut& col_out, const float* x) {
  block_cast(row, row_out, x);
  block_cast(col, col_out, x);
}
}  // namespace fp8lm
