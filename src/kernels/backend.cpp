#include "kernels/backend.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

void Backend::refuse(const char* op) const {
  throw Error(fmt::format("{} is not available on {}", op, name()));
}

void Backend::attention_forward_unfused(float*, float*, const float*, int64_t, int64_t, int64_t,
                                        int64_t, int64_t) {
  refuse("unfused attention (--no-fusion; the CPU has it)");
}
void Backend::attention_backward_unfused(float*, const float*, const float*, const float*, int64_t,
                                         int64_t, int64_t, int64_t, int64_t) {
  refuse("unfused attention (--no-fusion; the CPU has it)");
}
float Backend::softmax_cross_entropy_unfused(float*, float*, const float*, const int32_t*, int64_t,
                                             int64_t, float) {
  refuse("the unfused loss (--no-fusion; the CPU has it)");
}
void Backend::accumulate_into_bf16(bf16_t*, const float*, int64_t) {
  refuse("BF16 gradient accumulation (--fp8-weights' gradients on the CPU)");
}
void Backend::block_cast(const BlockCast&, const BlockCastOut&, const float*) {
  refuse("block-scaled casts (the block, mxfp8 and nvfp4 recipes; the CPU has them)");
}
void Backend::block_cast_pair(const BlockCast& row, const BlockCastOut& row_out,
                              const BlockCast& col, const BlockCastOut& col_out, const float* x) {
  block_cast(row, row_out, x);
  block_cast(col, col_out, x);
}
void Backend::grad_norm(float*, float*, float, const AdamWTensor*, int, int64_t) {
  refuse("the multi-tensor gradient norm (the CPU's optimizer runs in train/adamw.cpp)");
}
void Backend::adamw_step(const AdamWTensor*, int, int64_t, const AdamWHyper&, const float*) {
  refuse("the multi-tensor AdamW step (the CPU's optimizer runs in train/adamw.cpp)");
}

}  // namespace fp8lm
