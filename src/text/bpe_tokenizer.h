#pragma once
// A byte-level BPE tokenizer (GPT-2's kind): the text cut at added tokens (special tokens such
// as <|endoftext|>, matched literally, leftmost and then longest first), each part split by
// GPT-2's pattern (pretokenize.h), each piece's bytes mapped to the byte-level alphabet
// (byte_level.h) and merged by rank as the merge list says. Reads Hugging Face's tokenizer.json
// (a BPE model with the ByteLevel pre-tokenizer) and GPT-2's vocab.json + merges.txt; what
// either holds that this tokenizer does not do is refused with a one-line error naming it.
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace fp8lm::text {

struct AddedToken {
  int32_t id = 0;
  std::string content;
  bool special = false;
};

class BpeTokenizer {
 public:
  // vocab: token string (in the byte-level alphabet) -> id; merges in rank order, each pair's
  // concatenation a token of the vocabulary. Throws Error naming a merge that is not.
  BpeTokenizer(std::unordered_map<std::string, int32_t> vocab,
               const std::vector<std::pair<std::string, std::string>>& merges,
               std::vector<AddedToken> added = {}, bool add_prefix_space = false,
               bool ignore_merges = false);
  ~BpeTokenizer();
  BpeTokenizer(BpeTokenizer&&) noexcept;
  BpeTokenizer& operator=(BpeTokenizer&&) noexcept;

  // Hugging Face's tokenizer.json; GPT-2's vocab.json and merges.txt.
  static BpeTokenizer from_hf_json(const std::string& path);
  static BpeTokenizer from_gpt2_files(const std::string& vocab_json, const std::string& merges_txt);
  // Either: a tokenizer.json file, or a directory holding tokenizer.json or vocab.json with
  // merges.txt.
  static BpeTokenizer load(const std::string& path);

  std::vector<int32_t> encode(std::string_view text) const;
  void encode(std::string_view text, std::vector<int32_t>& out) const;  // appends
  // The bytes the ids stand for; added tokens as their text (special ones too unless skipped).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special = false) const;
  // As decode, for what a model generated: a model's vocabulary may be padded past its
  // tokenizer's (a multiple of 64, as GPT-2's 50257 to 50304), and an id beyond the tokenizer
  // is written as <|id N|> rather than refused.
  std::string decode_generated(const std::vector<int32_t>& ids) const;

  int64_t vocab_size() const;  // one past the largest id
  std::optional<int32_t> token_id(std::string_view token) const;
  const std::string& token(int32_t id) const;  // as stored (byte-level alphabet)
  const std::vector<AddedToken>& added_tokens() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8lm::text
