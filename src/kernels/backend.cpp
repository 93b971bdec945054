#include "kernels/backend.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

void Backend::refuse(const char* op) const {
  throw Error(
      fmt::format("{} is not available on {} (the CPU has it; use --device cpu)", op, name()));
}

void Backend::attention_forward_unfused(float*, float*, const float*, int64_t, int64_t, int64_t,
                                        int64_t) {
  refuse("unfused attention (--no-fusion)");
}
void Backend::attention_backward_unfused(float*, const float*, const float*, const float*, int64_t,
                                         int64_t, int64_t, int64_t) {
  refuse("unfused attention (--no-fusion)");
}
float Backend::softmax_cross_entropy_unfused(float*, float*, const float*, const int32_t*, int64_t,
                                             int64_t, float) {
  refuse("the unfused loss (--no-fusion)");
}
void Backend::attention_decode(float*, const float*, const float*, const float*, int64_t, int64_t,
                               int64_t, int64_t, int64_t) {
  refuse("KV-cache attention");
}
void Backend::accumulate_into_bf16(bf16_t*, const float*, int64_t) {
  refuse("BF16 gradient accumulation");
}

}  // namespace fp8lm
