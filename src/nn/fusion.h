#pragma once
// Whether modules run their fused kernels (the default) or the unfused twins: LayerNorm then a
// separate FP8 cast, bias then activation then cast, residual add then LayerNorm, softmax then
// a separate cross-entropy pass, one AdamW pass per parameter. `--no-fusion` measures what
// fusion is worth; both paths compute the same values (tests train with each).
//
// The CPU backend counts the bytes each op reads and writes (kernels/traffic.h), so the
// benchmark can show the traffic fusion saves.
#include "core/scoped_value.h"

namespace fp8lm {

using FusionSetting = ThreadSetting<bool, true, struct FusionTag>;
inline bool fusion_enabled() {
  return FusionSetting::value();
}
using FusionScope = FusionSetting::Scope;

}  // namespace fp8lm
