#include "train/token_shards.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"
#include "text/bpe_tokenizer.h"

namespace fp8lm {
namespace fs = std::filesystem;

namespace {

// The header's fields, little-endian (as x86-64 and ARM hosts store them).
struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t count;
  uint64_t reserved;
};
static_assert(sizeof(ShardHeader) == kShardHeaderBytes);

// The index of the first of n tokens of type T at data that is not below limit; n where none
// is. A chunk's maximum first (a loop the compiler vectorizes), the chunk searched only when it
// holds one: the check costs a pass over the mapped file at memory speed, once per open.
template <class T>
int64_t first_not_below(const uint8_t* data, int64_t n, uint64_t limit) {
  constexpr int64_t kChunk = 1 << 16;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t end = std::min(n, c + kChunk);
    T top = 0;
    for (int64_t i = c; i < end; ++i) {
      T v;
      std::memcpy(&v, data + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      top = std::max(top, v);
    }
    if (top < limit) continue;
    for (int64_t i = c; i < end; ++i) {
      T v;
      std::memcpy(&v, data + i * static_cast<int64_t>(sizeof(T)), sizeof(T));
      if (v >= limit) return i;
    }
  }
  return n;
}

}  // namespace

ShardWriter::ShardWriter(std::string path, int token_bytes)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), token_bytes_(token_bytes) {
  f_ = std::fopen(tmp_.c_str(), "wb");
  if (!f_) throw Error(fmt::format("{}: cannot be written", tmp_));
  const ShardHeader h{};
  if (std::fwrite(&h, sizeof h, 1, f_) != 1) throw Error(fmt::format("{}: write failed", tmp_));
}

ShardWriter::~ShardWriter() {
  if (f_) {  // not finished: an error on the way; the partial file goes
    std::fclose(f_);
    std::remove(tmp_.c_str());
  }
}

void ShardWriter::append(const std::vector<int32_t>& tokens) {
  size_t written;
  if (token_bytes_ == 2) {
    std::vector<uint16_t> v(tokens.begin(), tokens.end());
    written = std::fwrite(v.data(), 2, v.size(), f_);
  } else {
    written = std::fwrite(tokens.data(), 4, tokens.size(), f_);
  }
  if (written != tokens.size()) throw Error(fmt::format("{}: write failed (disk full?)", tmp_));
  count_ += static_cast<int64_t>(tokens.size());
}

void ShardWriter::finish() {
  ShardHeader h{};
  std::memcpy(h.magic, kShardMagic, sizeof h.magic);
  h.version = kShardVersion;
  h.token_bytes = static_cast<uint32_t>(token_bytes_);
  h.count = static_cast<uint64_t>(count_);
  const bool ok = std::fseek(f_, 0, SEEK_SET) == 0 && std::fwrite(&h, sizeof h, 1, f_) == 1 &&
                  std::fflush(f_) == 0 && ::fsync(fileno(f_)) == 0;
  std::fclose(f_);
  f_ = nullptr;
  if (!ok) {
    std::remove(tmp_.c_str());
    throw Error(fmt::format("{}: write failed (disk full?)", tmp_));
  }
  fs::rename(tmp_, path_);
}

MappedShard::MappedShard(const std::string& path, int64_t vocab)
    : path_(path), map_(InputFile(path, "")) {
  const size_t size = map_.size();
  if (size < static_cast<size_t>(kShardHeaderBytes))
    throw Error(fmt::format("{}: {} bytes, shorter than a shard's header", path, size));
  ShardHeader h;
  std::memcpy(&h, map_.data(), sizeof h);
  if (std::memcmp(h.magic, kShardMagic, sizeof h.magic) != 0)
    throw Error(fmt::format("{}: not a token shard (wrong magic)", path));
  if (h.version != kShardVersion)
    throw Error(fmt::format("{}: shard format version {} (this fp8lm reads {})", path, h.version,
                            kShardVersion));
  if (h.token_bytes != 2 && h.token_bytes != 4)
    throw Error(fmt::format("{}: {} bytes per token (2 or 4)", path, h.token_bytes));
  token_bytes_ = static_cast<int>(h.token_bytes);
  const uint64_t want = static_cast<uint64_t>(kShardHeaderBytes) + h.count * h.token_bytes;
  if (h.count > (uint64_t{1} << 40) || want != size)
    throw Error(fmt::format("{}: {} bytes where the header's {} tokens need {} (truncated?)", path,
                            size, h.count, want));
  count_ = static_cast<int64_t>(h.count);
  data_ = map_.data() + kShardHeaderBytes;
  const auto limit = static_cast<uint64_t>(vocab);
  const int64_t bad = token_bytes_ == 2 ? first_not_below<uint16_t>(data_, count_, limit)
                                        : first_not_below<uint32_t>(data_, count_, limit);
  if (bad < count_) {
    uint32_t id = 0;  // as stored: an id of 2^31 or more is no negative number
    std::memcpy(&id, data_ + bad * token_bytes_, static_cast<size_t>(token_bytes_));
    throw Error(
        fmt::format("{}: token {} (byte offset {}) is id {}, not below the vocabulary size {}",
                    path, bad, kShardHeaderBytes + bad * token_bytes_, id, vocab));
  }
}

int32_t MappedShard::operator[](int64_t i) const {
  const uint8_t* p = data_ + static_cast<size_t>(i) * static_cast<size_t>(token_bytes_);
  if (token_bytes_ == 2) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
  }
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

bool is_token_dataset(const std::string& path) {
  std::error_code ec;
  return fs::is_directory(path, ec) && fs::exists(fs::path(path) / "manifest.json", ec);
}

namespace {

// A dataset's files lie in its directory: a name with a path in it ("../../etc/passwd",
// "/dev/zero") would read a file that is not the dataset's.
std::string file_in_dataset(const std::string& name, const std::string& what) {
  if (!is_plain_file_name(name))
    throw Error(fmt::format("{}: '{}' is not a file name in the dataset's directory", what, name));
  return name;
}

}  // namespace

ShardManifest read_manifest(const std::string& dir) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  const nlohmann::json j = read_json_file(path, kJsonFileBytes);
  if (!j.is_object() || !j.contains("format") || j["format"] != "fp8lm-token-shards")
    throw Error(fmt::format("{}: not an fp8lm token dataset manifest", path));
  ShardManifest m;
  // Each field through core/json's checked reads: a number out of the type's range (an eot of
  // 1e39) is an error naming the field, never a conversion with undefined behaviour.
  m.vocab_size = json_require<int64_t>(j, "vocab_size", path);
  m.eot = json_require<int32_t>(j, "eot", path);
  m.token_bytes = json_require<int>(j, "token_bytes", path);
  const auto shard = [&](const nlohmann::json& s, const std::string& what) {
    return std::pair(file_in_dataset(json_require<std::string>(s, "file", what), what),
                     json_require<int64_t>(s, "tokens", what));
  };
  if (!j.contains("train") || !j["train"].is_array())
    throw Error(fmt::format("{}: \"train\" is not a list of shards", path));
  for (size_t i = 0; i < j["train"].size(); ++i)
    m.train.push_back(shard(j["train"][i], fmt::format("{}: train shard {}", path, i)));
  if (!j.contains("validation")) throw Error(fmt::format("{}: no \"validation\"", path));
  m.validation = shard(j["validation"], path + ": validation");
  m.documents = json_value<int64_t>(j, "documents", 0, path);
  m.validation_documents = json_value<int64_t>(j, "validation_documents", 0, path);
  m.tokenizer = file_in_dataset(json_value<std::string>(j, "tokenizer", "tokenizer.json", path),
                                path + ": tokenizer");
  if (m.token_bytes != 2 && m.token_bytes != 4)
    throw Error(fmt::format("{}: token_bytes {} is not a token size shards have (2 or 4)", path,
                            m.token_bytes));
  // A token is an int32 id; two bytes hold ids below 65536.
  const int64_t widest = m.token_bytes == 2 ? int64_t{1} << 16 : int64_t{INT32_MAX} + 1;
  if (m.vocab_size < 1 || m.vocab_size > widest)
    throw Error(fmt::format("{}: vocab_size {} is not 1 to {} (token_bytes {})", path, m.vocab_size,
                            widest, m.token_bytes));
  if (m.eot < 0 || m.eot >= m.vocab_size)
    throw Error(
        fmt::format("{}: eot {} is not a token id (0 to {})", path, m.eot, m.vocab_size - 1));
  if (m.train.empty()) throw Error(fmt::format("{}: no train shards", path));
  for (const auto& [file, n] : m.train)
    if (n < 0) throw Error(fmt::format("{}: {} has {} tokens", path, file, n));
  if (m.validation.second < 0)
    throw Error(fmt::format("{}: {} has {} tokens", path, m.validation.first, m.validation.second));
  return m;
}

void write_manifest(const std::string& dir, const ShardManifest& m) {
  nlohmann::ordered_json j;
  j["format"] = "fp8lm-token-shards";
  j["version"] = kShardVersion;
  j["vocab_size"] = m.vocab_size;
  j["eot"] = m.eot;
  j["token_bytes"] = m.token_bytes;
  j["tokenizer"] = m.tokenizer;
  j["documents"] = m.documents;
  j["validation_documents"] = m.validation_documents;
  j["train"] = nlohmann::ordered_json::array();
  for (const auto& [file, n] : m.train) j["train"].push_back({{"file", file}, {"tokens", n}});
  j["validation"] = {{"file", m.validation.first}, {"tokens", m.validation.second}};
  const std::string path = (fs::path(dir) / "manifest.json").string();
  {
    std::ofstream out(path + ".tmp");
    out << j.dump(2) << "\n";
    if (!out.flush()) throw Error(fmt::format("{}: cannot be written", path));
  }
  fs::rename(path + ".tmp", path);
}

TokenDataset::TokenDataset(const std::string& dir, int64_t seq_len, uint64_t seed,
                           int64_t model_vocab)
    : manifest_(read_manifest(dir)), rng_(seed) {
  const int64_t vocab = manifest_.vocab_size;
  if (vocab > model_vocab)
    throw Error(
        fmt::format("{}: its vocabulary {} is beyond the model's {}", dir, vocab, model_vocab));
  // The tokenizer now, not when a sample is decoded after the last step.
  const std::string tokenizer = (fs::path(dir) / manifest_.tokenizer).string();
  try {
    tokenizer_ = std::make_unique<text::BpeTokenizer>(text::BpeTokenizer::load(tokenizer));
  } catch (const Error& e) {
    throw Error(fmt::format("token dataset {}: its tokenizer: {}", dir, e.what()));
  }
  if (tokenizer_->vocab_size() != vocab)
    throw Error(fmt::format("{}: {} tokens where the dataset's manifest says vocab_size {}",
                            tokenizer, tokenizer_->vocab_size(), vocab));
  const auto open = [&](const std::string& file, int64_t n) {
    auto shard = std::make_unique<MappedShard>((fs::path(dir) / file).string(), vocab);
    if (shard->size() != n)
      throw Error(fmt::format("{}: {} tokens where the manifest says {}", file, shard->size(), n));
    if (shard->token_bytes() != manifest_.token_bytes)
      throw Error(fmt::format("{}: {} bytes per token where the manifest says {}", file,
                              shard->token_bytes(), manifest_.token_bytes));
    return shard;
  };
  int64_t total = 0;
  for (const auto& [file, n] : manifest_.train) {
    train_.push_back(open(file, n));
    starts_.push_back(total);
    total += n;
  }
  starts_.push_back(total);
  val_ = open(manifest_.validation.first, manifest_.validation.second);
  if (total < seq_len + 1 || val_->size() < seq_len + 1)
    throw Error(fmt::format("{}: {} train and {} validation tokens are too few for --seq-len {}",
                            dir, total, val_->size(), seq_len));
}

TokenDataset::~TokenDataset() = default;

int32_t TokenDataset::train_token(int64_t i) const {
  const auto s = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), i) -
                                     starts_.begin() - 1);
  return (*train_[s])[i - starts_[s]];
}

Batch TokenDataset::next_train(int64_t B, int64_t T) {
  Batch b{B, T, std::vector<int32_t>(static_cast<size_t>(B * T)),
          std::vector<int32_t>(static_cast<size_t>(B * T))};
  std::uniform_int_distribution<int64_t> start(0, starts_.back() - T - 1);
  for (int64_t i = 0; i < B; ++i) {
    const int64_t s = start(rng_);
    for (int64_t t = 0; t < T; ++t) {
      b.tokens[static_cast<size_t>(i * T + t)] = train_token(s + t);
      b.targets[static_cast<size_t>(i * T + t)] = train_token(s + t + 1);
    }
  }
  return b;
}

std::vector<Batch> TokenDataset::validation(int64_t B, int64_t T, int64_t max_batches) const {
  // The windows read no further than this.
  std::vector<int32_t> ids(static_cast<size_t>(std::min(val_->size(), max_batches * B * T + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = (*val_)[static_cast<int64_t>(i)];
  return consecutive_batches(ids, B, T, max_batches);
}

std::string TokenDataset::state() const {
  return rng_state(rng_);
}

void TokenDataset::restore(const std::string& state) {
  restore_rng(rng_, state);
}

std::vector<int32_t> TokenDataset::validation_prompt(int64_t n) const {
  std::vector<int32_t> p;
  for (int64_t i = 0; i < std::min(n, val_->size()); ++i) p.push_back((*val_)[i]);
  return p;
}

std::string TokenDataset::decode(const std::vector<int32_t>& ids) const {
  return tokenizer_->decode_generated(ids);
}

}  // namespace fp8lm
