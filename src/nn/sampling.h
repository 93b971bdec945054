#pragma once
// Token choice from one row of logits on the host (fp8lm/generation.h's Sampling rules).
#include <cstdint>
#include <utility>
#include <vector>

#include "fp8lm/generation.h"

namespace fp8lm {

// The tokens a draw picks from and their probabilities (summing to 1), most likely first (equal
// ones by id), after the temperature, top_k and top_p. Throws Error for NaN or +Inf logits.
std::vector<std::pair<int32_t, double>> sampling_candidates(const float* logits, int64_t V,
                                                            const Sampling& s);

// The token drawn for sequence `sequence` at step `step` (s not greedy).
int32_t sample_token(const float* logits, int64_t V, const Sampling& s, uint64_t sequence,
                     uint64_t step);

// u in [0, 1) with 53 random bits: draw `step` of the generator keyed by (seed, sequence).
double sampling_uniform(uint64_t seed, uint64_t sequence, uint64_t step);

}  // namespace fp8lm
