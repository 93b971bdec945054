#pragma once
// Learning a byte-level BPE from text (fp8lm tokenizer train): GPT-2's pre-tokenizer pieces
// counted over all the text, then, from the 256 byte symbols, the most frequent adjacent pair
// merged into a new token again and again until the vocabulary has its size (or no pair occurs
// min_frequency times). Ties go to the pair whose merged token sorts first, so the result
// depends on the text only. The result is a Hugging Face tokenizer.json (BPE model, ByteLevel
// pre-tokenizer, post-processor and decoder) that their `tokenizers` library loads and encodes
// with exactly as BpeTokenizer does.
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace fp8lm::text {

struct BpeTrainerOptions {
  int64_t vocab_size = 8192;  // special tokens, the 256 bytes and the merges
  int64_t min_frequency = 2;
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
};

class BpeTrainer {
 public:
  // Throws Error naming the flag for a vocabulary too small for the specials and the bytes, a
  // min_frequency below 1 or an empty special token.
  explicit BpeTrainer(BpeTrainerOptions o);
  // Counts the pieces of one text (a trainer per thread; merge_counts joins them).
  void add_text(std::string_view text);
  void merge_counts(const BpeTrainer& other);
  // The tokenizer.json text.
  std::string train() const;
  int64_t pieces() const { return static_cast<int64_t>(counts_.size()); }

 private:
  BpeTrainerOptions o_;
  std::unordered_map<std::string, int64_t> counts_;
};

}  // namespace fp8lm::text
