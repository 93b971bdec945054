#pragma once
// Delayed scaling of every FP8 slot of the model in one launch (fp8/scaling.h's
// update_delayed_scaling, slot by slot, bit for bit). The state is structure-of-arrays on the
// device: slot i's history is amax_history[i*H .. i*H+H), [0] accumulating this step.
#include <cuda_runtime_api.h>

#include "fp8/recipe.h"
#include "kernels/tensor.h"

namespace fp8lm::cuda {

using fp8lm::ScalingSlots;  // kernels/tensor.h

// For the slots [first, first + count): amax from the history (max, NaN propagating, or the
// newest), the history rolled when [0] is non-zero, scale = compute_scale(amax, fp8_max,
// margin, previous scale), scale_inv = 1 / scale.
void update_delayed_scaling(const ScalingSlots& slots, int first, int count, int margin,
                            AmaxComputeAlgo algo, cudaStream_t stream);
// Current scaling: *scale = compute_scale(*amax, fp8_max, margin, 1), *scale_inv = 1 / *scale.
void scale_from_amax(float* scale, float* scale_inv, const float* amax, float fp8_max, int margin,
                     cudaStream_t stream);

}  // namespace fp8lm::cuda
