#pragma once
// What every backend's cross-entropy shares on the host: the check of the targets, and the
// mean of the per-row losses, so each backend reports the same mean for the same losses.
#include <cstdint>

namespace fp8lm {

// Error naming the first target >= V (negative targets are ignored rows).
void check_targets(const int32_t* targets, int64_t rows, int64_t V);
// The mean of losses over the rows whose target is not negative (0 if none), summed in row
// order in double: the same mean for any thread count.
float mean_loss(const float* losses, const int32_t* targets, int64_t rows);

}  // namespace fp8lm
