// Generation's token choice: the sampling rules (temperature, top-k, top-p as Hugging Face's
// warpers apply them), the draw's distribution and reproducibility, and generation with stop
// tokens and streaming on a model.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>

#include "fp8lm/error.h"
#include "nn/gpt.h"
#include "nn/sampling.h"

namespace fp8lm {
namespace {

Sampling at(float temperature, int64_t top_k = 0, float top_p = 1.0f, uint64_t seed = 0) {
  Sampling s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.top_p = top_p;
  s.seed = seed;
  return s;
}

std::vector<int32_t> tokens_of(const std::vector<std::pair<int32_t, double>>& c) {
  std::vector<int32_t> t;
  for (const auto& [token, p] : c) t.push_back(token);
  return t;
}

TEST(Sampling, BadSettingsNameTheFlag) {
  const auto expect_error = [](const Sampling& s, const std::string& flag) {
    try {
      s.validate();
      ADD_FAILURE() << "no error for " << flag;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(flag), std::string::npos) << e.what();
    }
  };
  expect_error(at(-0.5f), "--temperature");
  expect_error(at(NAN), "--temperature");
  expect_error(at(INFINITY), "--temperature");
  expect_error(at(1.0f, -1), "--top-k");
  expect_error(at(1.0f, 0, 0.0f), "--top-p");
  expect_error(at(1.0f, 0, 1.5f), "--top-p");
  expect_error(at(0.0f, 5), "--temperature");  // a cut without sampling
  expect_error(at(0.0f, 0, 0.9f), "--temperature");
  EXPECT_NO_THROW(at(0.0f).validate());
  EXPECT_NO_THROW(at(0.7f, 40, 0.95f).validate());
}

// Without cuts the candidates are every token with softmax(logits / T), most likely first and
// equal logits by id; probabilities in double to rounding.
TEST(Sampling, CandidatesAreTheSoftmaxAtTheTemperature) {
  const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 2.0f, 0.0f};
  for (const float t : {1.0f, 0.5f, 3.0f}) {
    const auto c = sampling_candidates(logits.data(), 5, at(t));
    EXPECT_EQ(tokens_of(c), (std::vector<int32_t>{1, 3, 0, 4, 2}));
    double z = 0;
    for (const float l : logits) z += std::exp(static_cast<double>(l) / t);
    for (const auto& [token, p] : c)
      EXPECT_NEAR(p, std::exp(static_cast<double>(logits[token]) / t) / z, 1e-12);
  }
  const std::vector<float> bad = {0.0f, NAN, 1.0f};
  EXPECT_THROW(sampling_candidates(bad.data(), 3, at(1.0f)), Error);
  const std::vector<float> inf = {0.0f, INFINITY};
  EXPECT_THROW(sampling_candidates(inf.data(), 2, at(1.0f)), Error);
  const std::vector<float> masked = {-INFINITY, 1.0f, -INFINITY};  // -Inf: probability 0
  EXPECT_EQ(sampling_candidates(masked.data(), 3, at(1.0f))[0].second, 1.0);
}

// top-k keeps the k largest and every token tied with the k-th (HF's TopKLogitsWarper removes
// only those below it), then renormalizes.
TEST(Sampling, TopKKeepsTheKLargestAndTiesWithTheKth) {
  const std::vector<float> logits = {1.0f, 3.0f, 3.0f, 2.0f, 0.0f};
  const auto kept = [&](int64_t k) {
    return tokens_of(sampling_candidates(logits.data(), 5, at(1.0f, k)));
  };
  EXPECT_EQ(kept(1), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(kept(2), (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(kept(3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(kept(5), (std::vector<int32_t>{1, 2, 3, 0, 4}));
  EXPECT_EQ(kept(99), kept(0));
  const auto c = sampling_candidates(logits.data(), 5, at(1.0f, 3));
  const double z = 2 * std::exp(3.0) + std::exp(2.0);
  EXPECT_NEAR(c[2].second, std::exp(2.0) / z, 1e-12);
}

// top-p against HF's own formulation, written here independently: sort ascending, remove the
// tokens whose cumulative probability is at most 1 - top_p, keep the most likely always.
TEST(Sampling, TopPKeepsWhatHuggingFacesWarperKeeps) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::uniform_real_distribution<float> uniform(0.05f, 0.95f);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> logits(12);
    for (float& l : logits) l = normal(rng);
    const float p = uniform(rng);
    std::vector<double> prob(12);
    double z = 0;
    const float top = *std::max_element(logits.begin(), logits.end());
    for (size_t i = 0; i < 12; ++i) z += prob[i] = std::exp(static_cast<double>(logits[i]) - top);
    std::vector<int32_t> ascending(12);
    std::iota(ascending.begin(), ascending.end(), 0);
    std::stable_sort(ascending.begin(), ascending.end(),
                     [&](int32_t a, int32_t b) { return logits[a] < logits[b]; });
    std::vector<int32_t> want;
    double cumulative = 0;
    for (size_t i = 0; i < 12; ++i) {
      cumulative += prob[ascending[i]] / z;
      if (cumulative > 1.0 - p || i == 11) want.push_back(ascending[i]);
    }
    std::vector<int32_t> got = tokens_of(sampling_candidates(logits.data(), 12, at(1.0f, 0, p)));
    std::sort(want.begin(), want.end());
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "top_p " << p;
  }
  // Exact halves: 0.5, 0.25, 0.125, 0.125.
  const std::vector<float> halves = {0.0f, std::log(0.5f), std::log(0.25f), std::log(0.25f)};
  const auto kept = [&](float p) {
    return tokens_of(sampling_candidates(halves.data(), 4, at(1.0f, 0, p)));
  };
  EXPECT_EQ(kept(0.4f), (std::vector<int32_t>{0}));
  EXPECT_EQ(kept(0.6f), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(kept(0.8f), (std::vector<int32_t>{0, 1, 2}));
  EXPECT_EQ(kept(0.9f), (std::vector<int32_t>{0, 1, 2, 3}));
  EXPECT_NEAR(sampling_candidates(halves.data(), 4, at(1.0f, 0, 0.6f))[1].second, 1.0 / 3, 1e-7);
}

// The draws follow the candidates' probabilities: over 200,000 draws each token's count is
// within 5 standard deviations of its expectation (a false alarm about once in 3 million runs
// per token), and a token cut by top-k is never drawn. The same address draws the same token.
TEST(Sampling, DrawsFollowTheProbabilitiesAndRepeatForASeed) {
  const std::vector<float> logits = {1.0f, 0.0f, 2.0f, -1.0f, 0.5f};
  for (const Sampling& s : {at(1.0f, 0, 1.0f, 7), at(0.7f, 3, 1.0f, 8)}) {
    const auto c = sampling_candidates(logits.data(), 5, s);
    std::map<int32_t, int64_t> count;
    const int64_t n = 200000;
    for (int64_t i = 0; i < n; ++i)
      ++count[sample_token(logits.data(), 5, s, static_cast<uint64_t>(i % 3),
                           static_cast<uint64_t>(i))];
    int64_t seen = 0;
    for (const auto& [token, p] : c) {
      const double sd = std::sqrt(n * p * (1 - p));
      EXPECT_NEAR(static_cast<double>(count[token]), n * p, 5 * sd) << "token " << token;
      seen += count[token];
    }
    EXPECT_EQ(seen, n) << "only candidates are drawn";
  }
  const Sampling s = at(1.0f, 0, 1.0f, 42);
  EXPECT_EQ(sample_token(logits.data(), 5, s, 1, 9), sample_token(logits.data(), 5, s, 1, 9));
  EXPECT_EQ(sampling_uniform(42, 1, 9), sampling_uniform(42, 1, 9));
  EXPECT_NE(sampling_uniform(42, 1, 9), sampling_uniform(43, 1, 9));
  EXPECT_NE(sampling_uniform(42, 1, 9), sampling_uniform(42, 2, 9));
  EXPECT_NE(sampling_uniform(42, 1, 9), sampling_uniform(42, 1, 10));
}

GPTConfig tiny_model() {
  return {.vocab = 64, .seq_len = 32, .d_model = 32, .n_layers = 2, .n_heads = 2, .ffn = 64};
}

// On a model: greedy through the options equals generate(); a seed repeats a sampled run and
// another seed gives another; top-k 1 is greedy; a stop token ends the sequence after its first
// occurrence; on_token sees every token in order and can end a sequence.
TEST(Generation, SamplingStopTokensAndStreaming) {
  GPT model(tiny_model(), 3);
  const std::vector<int32_t> prompts = {1, 2, 3, 4, 5, 6, 7, 8};  // two prompts of four
  const int64_t B = 2, P = 4, n = 20;
  const std::vector<int32_t> greedy = model.generate(prompts.data(), B, P, n);
  const auto run = [&](const GenerateOptions& o) {
    return model.generate_sequences(prompts.data(), B, P, n, o);
  };
  const auto flat = [](const std::vector<std::vector<int32_t>>& v) {
    std::vector<int32_t> f;
    for (const auto& s : v) f.insert(f.end(), s.begin(), s.end());
    return f;
  };
  EXPECT_EQ(flat(run({})), greedy);
  GenerateOptions o;
  o.sampling = at(1.5f, 0, 1.0f, 11);
  const auto a = run(o), again = run(o);
  EXPECT_EQ(a, again);
  o.sampling.seed = 12;
  EXPECT_NE(run(o), a);
  EXPECT_NE(flat(a), greedy);
  o.sampling = at(1.5f, 1, 1.0f, 11);
  EXPECT_EQ(flat(run(o)), greedy) << "top-k 1 keeps only the most likely token";

  GenerateOptions stop;
  const int32_t s0 = greedy[5];  // sequence 0's sixth token: it ends at its first occurrence
  stop.stop_tokens = {s0};
  const auto stopped = run(stop);
  const auto first = std::find(greedy.begin(), greedy.begin() + n, s0) - greedy.begin();
  EXPECT_EQ(stopped[0], std::vector<int32_t>(greedy.begin(), greedy.begin() + first + 1));
  const auto first1 = std::find(greedy.begin() + n, greedy.end(), s0) - (greedy.begin() + n);
  EXPECT_EQ(stopped[1],
            std::vector<int32_t>(greedy.begin() + n,
                                 greedy.begin() + n + std::min<int64_t>(first1 + 1, n)));

  GenerateOptions stream;
  std::vector<std::vector<int32_t>> seen(2);
  stream.on_token = [&](int64_t b, int32_t t) {
    seen[b].push_back(t);
    return !(b == 1 && seen[1].size() == 3);  // sequence 1 ends after three tokens
  };
  const auto streamed = run(stream);
  EXPECT_EQ(streamed, seen);
  EXPECT_EQ(streamed[0], std::vector<int32_t>(greedy.begin(), greedy.begin() + n));
  EXPECT_EQ(streamed[1], std::vector<int32_t>(greedy.begin() + n, greedy.begin() + n + 3));
}

}  // namespace
}  // namespace fp8lm
