#pragma once
// Training data: the stride task (x_t = (a + k·t) mod V, a random start, k a random stride in
// [1, K]) and byte-level text from a file with a train/validation split.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace fp8lm {

struct Batch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens;   // [B, T]
  std::vector<int32_t> targets;  // [B, T]: the next token
};

class StrideTask {
 public:
  StrideTask(int64_t vocab, int64_t max_stride, uint64_t seed);
  Batch next(int64_t B, int64_t T);
  // One sequence of length n with start a and stride k.
  std::vector<int32_t> sequence(int64_t a, int64_t k, int64_t n) const;
  // Whether each generated token is the one the prompt's stride predicts at its position (the
  // stride is read off the prompt's last two tokens; an early mistake is not forgiven).
  static std::vector<bool> continues_stride(const std::vector<int32_t>& prompt,
                                            const std::vector<int32_t>& generated, int64_t vocab);
  int64_t vocab() const { return vocab_; }
  int64_t max_stride() const { return max_stride_; }
  // Draws a start and stride.
  std::pair<int64_t, int64_t> draw();
  // The stream's position (RNG state) as text, and back; restore throws Error on bad text.
  std::string state() const;
  void restore(const std::string& state);

 private:
  int64_t vocab_, max_stride_;
  std::mt19937_64 rng_;
};

class TextData {
 public:
  // Reads the whole file; the last val_fraction of its bytes is the validation split.
  // Throws Error for a missing, unreadable or too-short file.
  TextData(const std::string& path, int64_t seq_len, double val_fraction, uint64_t seed);
  Batch next_train(int64_t B, int64_t T);
  // Consecutive validation windows (up to max_batches batches of B).
  std::vector<Batch> validation(int64_t B, int64_t T, int64_t max_batches) const;
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::string state() const;
  void restore(const std::string& state);
  int64_t train_size() const { return split_; }

 private:
  std::vector<uint8_t> bytes_;
  int64_t split_;
  std::mt19937_64 rng_;
};

}  // namespace fp8lm
