#pragma once
// Token datasets (fp8lm data prepare; train/eval --data DIR): a directory of token shards and a
// manifest. A shard is a 32-byte header (the magic "FP8LMTOK", format version 1, the bytes per
// token, 2 for uint16 or 4 for uint32, and the token count, all little-endian), then the tokens;
// each document's tokens are followed by the end-of-text token. manifest.json names the shards
// (train-NNNNN.tok, val.tok), their token counts, the vocabulary size, the end-of-text id and the
// tokenizer (a copy, tokenizer.json, beside them). Training reads the shards memory-mapped.
// Everything a dataset holds is checked once, when it is opened: every token id lies below the
// vocabulary, the tokenizer is there and is the vocabulary; a step reads without checks.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/input_file.h"
#include "train/data.h"

namespace fp8lm {
namespace text {
class BpeTokenizer;
}

inline constexpr char kShardMagic[8] = {'F', 'P', '8', 'L', 'M', 'T', 'O', 'K'};
inline constexpr uint32_t kShardVersion = 1;
inline constexpr int64_t kShardHeaderBytes = 32;

// Writes one shard: tokens appended, the header's count filled in by finish(), which renames
// the temporary file into place (a killed prepare leaves no shard that looks whole).
class ShardWriter {
 public:
  ShardWriter(std::string path, int token_bytes);
  ~ShardWriter();
  void append(const std::vector<int32_t>& tokens);
  int64_t tokens() const { return count_; }
  void finish();

 private:
  std::string path_, tmp_;
  int token_bytes_;
  int64_t count_ = 0;
  std::FILE* f_ = nullptr;
};

// A shard mapped read-only. Throws Error naming the file for a wrong magic, version or token
// size, a size that is not the header's count of tokens, or a token id not below vocab (the
// first such one: its index, byte offset and id).
class MappedShard {
 public:
  MappedShard(const std::string& path, int64_t vocab);
  int64_t size() const { return count_; }
  int token_bytes() const { return token_bytes_; }
  int32_t operator[](int64_t i) const;

 private:
  std::string path_;
  FileMapping map_;
  const uint8_t* data_ = nullptr;  // the tokens, after the header
  int64_t count_ = 0;
  int token_bytes_ = 2;
};

struct ShardManifest {
  int64_t vocab_size = 0;
  int32_t eot = 0;
  int token_bytes = 2;
  std::vector<std::pair<std::string, int64_t>> train;  // file, tokens
  std::pair<std::string, int64_t> validation;
  int64_t documents = 0, validation_documents = 0;
  std::string tokenizer = "tokenizer.json";
};

// dir/manifest.json; Error naming the field that is missing or wrong (a token size the reader
// has no width for, a vocabulary beyond it, an end-of-text id outside the vocabulary).
ShardManifest read_manifest(const std::string& dir);
void write_manifest(const std::string& dir, const ShardManifest& m);
// Whether path is a directory holding a manifest.json (a token dataset, not a text file).
bool is_token_dataset(const std::string& path);

// Training batches from a token dataset: windows of T + 1 tokens at uniformly drawn starts over
// the train shards taken as one stream (the draw from the seed's generator, whose state is the
// dataset's position: resume continues with the exact next batch), and consecutive validation
// windows from val.tok. model_vocab is the vocabulary of the model that reads it: a dataset
// whose vocabulary is beyond it is refused, as are shards whose ids are beyond the dataset's,
// and a tokenizer that is missing or of another vocabulary size.
class TokenDataset : public TextSource {
 public:
  TokenDataset(const std::string& dir, int64_t seq_len, uint64_t seed, int64_t model_vocab);
  ~TokenDataset() override;
  Batch next_train(int64_t B, int64_t T) override;
  std::vector<Batch> validation(int64_t B, int64_t T, int64_t max_batches) const override;
  std::string state() const override;
  void restore(const std::string& state) override;
  std::vector<int32_t> validation_prompt(int64_t n) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  std::vector<int32_t> stop_tokens() const override { return {manifest_.eot}; }
  const ShardManifest& manifest() const { return manifest_; }

 private:
  int32_t train_token(int64_t i) const;  // position i of the train stream
  ShardManifest manifest_;
  std::vector<std::unique_ptr<MappedShard>> train_;
  std::vector<int64_t> starts_;  // each train shard's first position in the stream
  std::unique_ptr<MappedShard> val_;
  std::unique_ptr<text::BpeTokenizer> tokenizer_;
  std::mt19937_64 rng_;
};

}  // namespace fp8lm
