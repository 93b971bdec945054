#pragma once
// How generation picks each token (fp8lm generate, Model::generate).
#include <cstdint>
#include <functional>
#include <vector>

namespace fp8lm {

// Greedy (temperature 0, the default: the most likely token, the lowest id among equals), or
// sampling: the logits divided by the temperature, cut to the top_k largest (0: no cut; ties
// with the k-th are kept), then to the most likely tokens until their probability reaches top_p
// (1: no cut; the first token is always kept), in that order, as Hugging Face transformers'
// logits warpers apply them. Each draw is addressed by (seed, sequence, step), so a run is
// reproducible and a sequence's tokens do not depend on the others in its batch.
struct Sampling {
  float temperature = 0.0f;
  int64_t top_k = 0;
  float top_p = 1.0f;
  uint64_t seed = 0;

  bool greedy() const { return temperature == 0.0f; }
  // Throws Error naming the flag: a negative or non-finite temperature, a negative top_k, a
  // top_p outside (0, 1], or top_k / top_p without sampling.
  void validate() const;
};

struct GenerateOptions {
  Sampling sampling;
  // A sequence ends after generating one of these (kept as its last token).
  std::vector<int32_t> stop_tokens;
  // Called with each token as it is chosen (sequence b, token), for streaming; returning false
  // ends that sequence after this token.
  std::function<bool(int64_t b, int32_t token)> on_token;
};

}  // namespace fp8lm
