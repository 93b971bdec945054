#include "nn/sampling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/counter_rng.h"
#include "fp8lm/error.h"

namespace fp8lm {

void Sampling::validate() const {
  if (!std::isfinite(temperature))
    throw Error(fmt::format("--temperature {} is not a finite number", temperature));
  if (temperature < 0.0f)
    throw Error(fmt::format("--temperature {} must be 0 (greedy) or more", temperature));
  if (top_k < 0) throw Error(fmt::format("--top-k {} is negative (0: no cut)", top_k));
  if (!(top_p > 0.0f && top_p <= 1.0f))
    throw Error(fmt::format("--top-p {} must be in (0, 1]", top_p));
  if (greedy() && (top_k != 0 || top_p != 1.0f))
    throw Error("--top-k and --top-p shape sampling: give a --temperature above 0");
}

std::vector<std::pair<int32_t, double>> sampling_candidates(const float* logits, int64_t V,
                                                            const Sampling& s) {
  std::vector<int32_t> order(static_cast<size_t>(V));
  std::iota(order.begin(), order.end(), 0);
  for (const int32_t t : order) {
    if (std::isnan(logits[t]) || logits[t] == INFINITY)
      throw Error(fmt::format("generate: the model's logit for token {} is {}", t, logits[t]));
  }
  // Most likely first, equal logits by id: the order the cuts and the draw walk.
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
  // top_k: every token whose logit is at least the k-th largest (ties kept, as HF's
  // TopKLogitsWarper removes only those below it).
  size_t kept = order.size();
  if (s.top_k > 0 && s.top_k < V) {
    const float kth = logits[order[static_cast<size_t>(s.top_k - 1)]];
    kept = static_cast<size_t>(s.top_k);
    while (kept < order.size() && logits[order[kept]] == kth) ++kept;
  }
  // The softmax of logit / temperature over the kept tokens, in double from the largest.
  const double t = s.temperature, top = static_cast<double>(logits[order[0]]) / t;
  std::vector<std::pair<int32_t, double>> c;
  double total = 0;
  for (size_t i = 0; i < kept; ++i) {
    const double w = std::exp(static_cast<double>(logits[order[i]]) / t - top);
    c.emplace_back(order[i], w);
    total += w;
  }
  // top_p: a token stays while the probability of the tokens before it is below top_p (HF's
  // TopPLogitsWarper removes those whose ascending cumulative sum is at most 1 - top_p).
  if (s.top_p < 1.0f) {
    double before = 0;
    size_t n = 0;
    while (n < c.size() && (n == 0 || before / total < s.top_p)) before += c[n++].second;
    c.resize(n);
    total = before;
  }
  for (auto& [token, p] : c) p /= total;
  return c;
}

double sampling_uniform(uint64_t seed, uint64_t sequence, uint64_t step) {
  // A key per sequence, two 32-bit draws per step: 53 bits of a double in [0, 1).
  const uint32_t key = counter_key(seed ^ (sequence * 0x9e3779b97f4a7c15ull));
  const auto i = static_cast<uint32_t>(2 * step);
  const uint64_t bits =
      (static_cast<uint64_t>(counter_bits(key, i)) << 21) ^ (counter_bits(key, i + 1) >> 11);
  return static_cast<double>(bits & ((1ull << 53) - 1)) * 0x1p-53;
}

int32_t sample_token(const float* logits, int64_t V, const Sampling& s, uint64_t sequence,
                     uint64_t step) {
  const auto c = sampling_candidates(logits, V, s);
  const double u = sampling_uniform(s.seed, sequence, step);
  double cumulative = 0;
  for (const auto& [token, p] : c) {
    cumulative += p;
    if (u < cumulative) return token;
  }
  return c.back().first;  // u beyond the rounded sum's end
}

}  // namespace fp8lm
