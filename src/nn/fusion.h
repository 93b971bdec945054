#pragma once
// Whether modules run their fused kernels (the default) or the unfused twins: LayerNorm then a
// separate FP8 cast, bias then activation then cast, residual add then LayerNorm, softmax then
// a separate cross-entropy pass, one AdamW pass per parameter. `--no-fusion` measures what
// fusion is worth; both paths compute the same values (tests train with each).
//
// The CPU backend counts the bytes each op reads and writes (kernels/traffic.h), so the
// benchmark can show the traffic fusion saves.
#include <cstdint>

#include "core/scoped_value.h"

namespace fp8lm {

bool fusion_enabled();

class FusionScope : ScopedValue<bool> {
 public:
  explicit FusionScope(bool enabled);
};

}  // namespace fp8lm
