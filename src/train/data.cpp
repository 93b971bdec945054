#include "train/data.h"

#include <fmt/format.h>

#include <sstream>

#include "core/input_file.h"
#include "fp8lm/error.h"
#include "train/token_shards.h"

namespace fp8lm {

StrideTask::StrideTask(int64_t vocab, int64_t max_stride, uint64_t seed)
    : vocab_(vocab), max_stride_(max_stride), rng_(seed) {
  if (max_stride < 1) throw Error(fmt::format("--max-stride {} must be at least 1", max_stride));
  if (vocab < 2) throw Error(fmt::format("--vocab {} is too small for the stride task", vocab));
}

std::pair<int64_t, int64_t> StrideTask::draw() {
  std::uniform_int_distribution<int64_t> start(0, vocab_ - 1), stride(1, max_stride_);
  const int64_t a = start(rng_);
  return {a, stride(rng_)};
}

std::string rng_state(const std::mt19937_64& rng) {
  std::ostringstream out;
  out << rng;
  return out.str();
}
void restore_rng(std::mt19937_64& rng, const std::string& state) {
  std::istringstream in(state);
  std::mt19937_64 restored;
  in >> restored;
  if (in.fail()) throw Error("checkpoint: the data stream's state is unreadable");
  rng = restored;
}

std::string StrideTask::state() const {
  return rng_state(rng_);
}
void StrideTask::restore(const std::string& state) {
  restore_rng(rng_, state);
}
std::string TextData::state() const {
  return rng_state(rng_);
}
void TextData::restore(const std::string& state) {
  restore_rng(rng_, state);
}

std::vector<int32_t> StrideTask::sequence(int64_t a, int64_t k, int64_t n) const {
  std::vector<int32_t> s(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t)
    s[static_cast<size_t>(t)] = static_cast<int32_t>((a + k * t) % vocab_);
  return s;
}

Batch StrideTask::next(int64_t B, int64_t T) {
  Batch b{B, T, std::vector<int32_t>(static_cast<size_t>(B * T)),
          std::vector<int32_t>(static_cast<size_t>(B * T))};
  for (int64_t i = 0; i < B; ++i) {
    const auto [a, k] = draw();
    const auto s = sequence(a, k, T + 1);
    for (int64_t t = 0; t < T; ++t) {
      b.tokens[static_cast<size_t>(i * T + t)] = s[static_cast<size_t>(t)];
      b.targets[static_cast<size_t>(i * T + t)] = s[static_cast<size_t>(t + 1)];
    }
  }
  return b;
}

std::vector<bool> StrideTask::continues_stride(const std::vector<int32_t>& prompt,
                                               const std::vector<int32_t>& generated,
                                               int64_t vocab) {
  std::vector<bool> ok(generated.size(), false);
  if (prompt.size() < 2) return ok;
  const int64_t k = ((prompt.back() - prompt[prompt.size() - 2]) % vocab + vocab) % vocab;
  int64_t expected = prompt.back();
  for (size_t i = 0; i < generated.size(); ++i) {
    expected = (expected + k) % vocab;
    ok[i] = generated[i] == expected;
  }
  return ok;
}

TextData::TextData(const std::string& path, int64_t seq_len, double val_fraction, uint64_t seed)
    : rng_(seed) {
  const std::string text = read_input_file(path, "--data", kTextFileBytes);
  bytes_.assign(text.begin(), text.end());
  if (bytes_.empty()) throw Error(fmt::format("{}: the data file is empty", path));
  const auto n = static_cast<int64_t>(bytes_.size());
  split_ = n - static_cast<int64_t>(static_cast<double>(n) * val_fraction);
  if (split_ < seq_len + 1 || n - split_ < seq_len + 1) {
    throw Error(fmt::format("{}: {} bytes is too short for --seq-len {} with a validation split",
                            path, n, seq_len));
  }
}

Batch TextData::next_train(int64_t B, int64_t T) {
  Batch b{B, T, std::vector<int32_t>(static_cast<size_t>(B * T)),
          std::vector<int32_t>(static_cast<size_t>(B * T))};
  std::uniform_int_distribution<int64_t> start(0, split_ - T - 1);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = start(rng_);
    for (int64_t t = 0; t < T; ++t) {
      b.tokens[static_cast<size_t>(i * T + t)] = bytes_[static_cast<size_t>(s + t)];
      b.targets[static_cast<size_t>(i * T + t)] = bytes_[static_cast<size_t>(s + t + 1)];
    }
  }
  return b;
}

std::vector<Batch> consecutive_batches(const std::vector<int32_t>& ids, int64_t B, int64_t T,
                                       int64_t max_batches) {
  std::vector<Batch> batches;
  const auto n = static_cast<int64_t>(ids.size());
  int64_t s = 0;
  while (static_cast<int64_t>(batches.size()) < max_batches && s + T + 1 <= n) {
    Batch b{0, T, {}, {}};
    while (b.B < B && s + T + 1 <= n) {
      b.tokens.insert(b.tokens.end(), ids.begin() + s, ids.begin() + s + T);
      b.targets.insert(b.targets.end(), ids.begin() + s + 1, ids.begin() + s + T + 1);
      ++b.B;
      s += T;
    }
    batches.push_back(std::move(b));
  }
  return batches;
}

std::vector<Batch> TextData::validation(int64_t B, int64_t T, int64_t max_batches) const {
  const std::vector<int32_t> held_out(bytes_.begin() + split_, bytes_.end());
  return consecutive_batches(held_out, B, T, max_batches);
}

std::vector<int32_t> TextData::validation_prompt(int64_t n) const {
  const auto end = std::min<int64_t>(static_cast<int64_t>(bytes_.size()), split_ + n);
  return {bytes_.begin() + split_, bytes_.begin() + end};
}

std::string TextData::decode(const std::vector<int32_t>& ids) const {
  std::string s;
  for (const int32_t c : ids) s.push_back(static_cast<char>(c));
  return s;
}

std::unique_ptr<TextSource> open_text_source(const std::string& path, int64_t seq_len,
                                             uint64_t seed, int64_t model_vocab) {
  if (is_token_dataset(path))
    return std::make_unique<TokenDataset>(path, seq_len, seed, model_vocab);
  if (model_vocab < 256)
    throw Error(fmt::format("{}: byte-level text needs a vocabulary of 256; the model's is {}",
                            path, model_vocab));
  return std::make_unique<TextData>(path, seq_len, 0.1, seed);
}

}  // namespace fp8lm
