#pragma once
// Training data: the stride task (x_t = (a + k·t) mod V, a random start, k a random stride in
// [1, K]), byte-level text from a file with a train/validation split, and (token_shards.h)
// token datasets.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace fp8lm {

// A data stream's position: its generator's state as text, and back (Error for bad text).
std::string rng_state(const std::mt19937_64& rng);
void restore_rng(std::mt19937_64& rng, const std::string& state);

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

// Training text, whatever its form: a byte-level file (TextData) or a token dataset
// (train/token_shards.h). Batches are windows of T + 1 tokens; the position in the stream is a
// string a checkpoint keeps.
class TextSource {
 public:
  virtual ~TextSource() = default;
  virtual Batch next_train(int64_t B, int64_t T) = 0;
  // Consecutive validation windows (up to max_batches batches of B).
  virtual std::vector<Batch> validation(int64_t B, int64_t T, int64_t max_batches) const = 0;
  virtual std::string state() const = 0;
  virtual void restore(const std::string& state) = 0;
  // The first n tokens of the validation text (a prompt for the run's sample), and the text
  // that tokens stand for.
  virtual std::vector<int32_t> validation_prompt(int64_t n) const = 0;
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;
  // Tokens after which a generated sample ends (a token dataset's end-of-text); none for bytes.
  virtual std::vector<int32_t> stop_tokens() const { return {}; }
};

// Consecutive windows of T + 1 tokens over ids (each next one starting T later), B to a batch,
// up to max_batches batches: the held-out loss's batches.
std::vector<Batch> consecutive_batches(const std::vector<int32_t>& ids, int64_t B, int64_t T,
                                       int64_t max_batches);

// A token dataset directory (manifest.json) or a byte-level text file, for a model of
// model_vocab tokens: where the data meets the model, every id it can hold must lie below that
// (a dataset's vocabulary, or 256 for bytes); Error otherwise.
std::unique_ptr<TextSource> open_text_source(const std::string& path, int64_t seq_len,
                                             uint64_t seed, int64_t model_vocab);

class TextData : public TextSource {
 public:
  // Reads the whole file; the last val_fraction of its bytes is the validation split.
  // Throws Error for a missing, unreadable or too-short file.
  TextData(const std::string& path, int64_t seq_len, double val_fraction, uint64_t seed);
  Batch next_train(int64_t B, int64_t T) override;
  std::vector<Batch> validation(int64_t B, int64_t T, int64_t max_batches) const override;
  const std::vector<uint8_t>& bytes() const { return bytes_; }
  std::string state() const override;
  void restore(const std::string& state) override;
  std::vector<int32_t> validation_prompt(int64_t n) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;

 private:
  std::vector<uint8_t> bytes_;
  int64_t split_;
  std::mt19937_64 rng_;
};

}  // namespace fp8lm
