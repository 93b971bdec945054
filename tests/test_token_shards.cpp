// Token datasets: shards written and mapped back (both token widths), malformed shards and
// manifests refused with the file named, and training windows drawn across shard boundaries,
// repeatable for a seed and resumable from the stream's state.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "fp8lm/error.h"
#include "test_util.h"
#include "train/token_shards.h"

namespace fp8lm {
namespace {
namespace fs = std::filesystem;

using test::fresh_dir;

TEST(TokenShards, WrittenTokensMapBackAtEitherWidth) {
  const std::string dir = fresh_dir("fp8lm_shards_rt");
  for (const int width : {2, 4}) {
    const std::string path = dir + "/s" + std::to_string(width) + ".tok";
    std::vector<int32_t> tokens;
    for (int32_t i = 0; i < 5000; ++i)
      tokens.push_back((i * 7919) % (width == 2 ? 65536 : 1 << 20));
    ShardWriter w(path, width);
    w.append({tokens.begin(), tokens.begin() + 1234});
    w.append({tokens.begin() + 1234, tokens.end()});
    EXPECT_FALSE(fs::exists(path)) << "only the temporary file until finish";
    w.finish();
    EXPECT_EQ(static_cast<int64_t>(fs::file_size(path)), kShardHeaderBytes + 5000 * width);
    const MappedShard m(path, width == 2 ? 65536 : 1 << 20);
    ASSERT_EQ(m.size(), 5000);
    for (int64_t i = 0; i < 5000; ++i) ASSERT_EQ(m[i], tokens[static_cast<size_t>(i)]) << i;
  }
}

using test::expect_error;

// A tokenizer.json of n tokens ("t0" ... ), no merges: what a dataset of vocabulary n names.
void write_tokenizer(const std::string& path, int n) {
  std::string vocab;
  for (int i = 0; i < n; ++i) vocab += fmt::format("{}\"t{}\": {}", i ? ", " : "", i, i);
  std::ofstream(path) << fmt::format(
      "{{\"model\": {{\"type\": \"BPE\", \"vocab\": {{{}}}, \"merges\": []}}, "
      "\"pre_tokenizer\": {{\"type\": \"ByteLevel\"}}}}",
      vocab);
}

std::string file_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Issue 30 (D1): an id past the vocabulary was read into the embedding lookup (SIGSEGV in eval,
// a crash in training). The shard is refused when it is opened, the first bad id named.
TEST(TokenShards, AnIdBeyondTheVocabularyIsRefusedAtOpenNamingIt) {
  const std::string dir = fresh_dir("fp8lm_shards_ids");
  for (const int width : {2, 4}) {
    const std::string path = dir + "/s" + std::to_string(width) + ".tok";
    std::vector<int32_t> tokens(200000, 7);  // past one chunk of the scan
    tokens[70000] = 1000;
    tokens[150000] = 999;
    ShardWriter w(path, width);
    w.append(tokens);
    w.finish();
    EXPECT_EQ(MappedShard(path, 1001).size(), 200000) << "ids below the vocabulary are fine";
    expect_error([&] { MappedShard(path, 1000); },
                 fmt::format("{}: token 70000 (byte offset {}) is id 1000, not below the "
                             "vocabulary size 1000",
                             path, 32 + 70000 * width));
  }
  // Two bytes 0xff 0xff after the header (the probe's case), and a 4-byte id of 2^31: as stored,
  // not a negative number.
  const std::string path = dir + "/s4.tok";
  std::string bytes = file_text(path);
  bytes.replace(32, 4, std::string("\0\0\0\x80", 4));
  std::ofstream(path, std::ios::binary) << bytes;
  expect_error([&] { MappedShard(path, 1 << 20); }, "token 0 (byte offset 32) is id 2147483648");
}

TEST(TokenShards, MalformedShardsAndManifestsNameTheProblem) {
  const std::string dir = fresh_dir("fp8lm_shards_bad");
  const std::string good = dir + "/good.tok";
  ShardWriter w(good, 2);
  w.append(std::vector<int32_t>(100, 7));
  w.finish();
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const auto variant = [&](const std::string& name, const std::string& content) {
    const std::string path = dir + "/" + name;
    std::ofstream(path, std::ios::binary) << content;
    return path;
  };
  std::string magic = bytes, version = bytes, width = bytes;
  magic[0] = 'X';
  version[8] = 9;
  width[12] = 3;
  expect_error([&] { MappedShard(variant("magic.tok", magic), 1000); }, "wrong magic");
  expect_error([&] { MappedShard(variant("version.tok", version), 1000); }, "version 9");
  expect_error([&] { MappedShard(variant("width.tok", width), 1000); }, "3 bytes per token");
  expect_error([&] { MappedShard(variant("cut.tok", bytes.substr(0, bytes.size() - 1)), 1000); },
               "truncated");
  expect_error([&] { MappedShard(variant("tiny.tok", "FP8L"), 1000); },
               "shorter than a shard's header");
  expect_error([&] { MappedShard(dir + "/missing.tok", 1000); }, "missing.tok");
  std::ofstream(dir + "/manifest.json") << "{\"format\": \"something else\"}";
  expect_error([&] { read_manifest(dir); }, "not an fp8lm token dataset");
  std::ofstream(dir + "/manifest.json")
      << "{\"format\": \"fp8lm-token-shards\", \"vocab_size\": 10}";
  expect_error([&] { read_manifest(dir); }, "manifest.json");
  EXPECT_TRUE(is_token_dataset(dir));
  EXPECT_FALSE(is_token_dataset(good));
}

// The process's mappings, as /proc lists them.
int mappings() {
  std::ifstream maps("/proc/self/maps");
  int n = 0;
  for (std::string line; std::getline(maps, line);) ++n;
  return n;
}

// A shard refused after it was mapped (here, for an id beyond the vocabulary) is unmapped: a
// process refused many files (a fuzzer, a notebook) would otherwise run out of mappings.
TEST(TokenShards, ARefusedShardLeavesNoMappingBehind) {
  const std::string path = fresh_dir("fp8lm_shards_refused") + "/big.tok";
  ShardWriter w(path, 2);
  w.append(std::vector<int32_t>(100000, 500));
  w.finish();
  const int before = mappings();
  for (int i = 0; i < 200; ++i) expect_error([&] { MappedShard(path, 100); }, "is id 500");
  EXPECT_LT(mappings(), before + 10) << "at most the allocator's own, not one per refusal";
}

// Two train shards of a counting stream (token i is i % 1000): every window is consecutive
// stream tokens, those crossing the shard boundary included, with the next token as target.
TEST(TokenDataset, WindowsSpanShardsRepeatForASeedAndResume) {
  const std::string dir = fresh_dir("fp8lm_shards_ds");
  ShardManifest m;
  m.vocab_size = 1000;
  m.eot = 0;
  const auto write = [&](const std::string& name, int64_t first, int64_t n) {
    ShardWriter w(dir + "/" + name, 2);
    std::vector<int32_t> t;
    for (int64_t i = first; i < first + n; ++i) t.push_back(static_cast<int32_t>(i % 1000));
    w.append(t);
    w.finish();
  };
  write("train-00000.tok", 0, 300);
  write("train-00001.tok", 300, 200);
  write("val.tok", 0, 100);
  m.train = {{"train-00000.tok", 300}, {"train-00001.tok", 200}};
  m.validation = {"val.tok", 100};
  write_manifest(dir, m);
  write_tokenizer(dir + "/tokenizer.json", 1000);
  TokenDataset a(dir, 32, 5, 1000), b(dir, 32, 5, 1024);
  bool crossed = false;
  for (int step = 0; step < 50; ++step) {
    const Batch x = a.next_train(4, 32);
    EXPECT_EQ(x.tokens, b.next_train(4, 32).tokens) << "same seed, same batches";
    for (int64_t r = 0; r < 4; ++r) {
      const int32_t first = x.tokens[static_cast<size_t>(r * 32)];
      crossed |= first < 300 && first + 32 >= 300;
      for (int64_t t = 0; t < 32; ++t) {
        ASSERT_EQ(x.tokens[static_cast<size_t>(r * 32 + t)], (first + t) % 1000);
        ASSERT_EQ(x.targets[static_cast<size_t>(r * 32 + t)], (first + t + 1) % 1000);
      }
    }
  }
  EXPECT_TRUE(crossed) << "some window should span the two shards";
  const std::string at = a.state();
  const Batch next = a.next_train(4, 32);
  TokenDataset c(dir, 32, 99, 1000);
  c.restore(at);
  EXPECT_EQ(c.next_train(4, 32).tokens, next.tokens) << "the state is the stream's position";
  const auto val = a.validation(2, 32, 8);
  ASSERT_EQ(val.size(), 2u);  // 100 tokens: three windows of 32 + 1, in batches of 2
  EXPECT_EQ(val[0].B, 2);
  EXPECT_EQ(val[1].B, 1);
  EXPECT_EQ(val[1].tokens[0], 64);
  expect_error([&] { TokenDataset(dir, 128, 1, 1000); }, "too few for --seq-len 128");
  m.train[1].second = 201;
  write_manifest(dir, m);
  expect_error([&] { TokenDataset(dir, 32, 1, 1000); }, "manifest says 201");
}

// Issue 30 (D1, D7, D22): what a dataset holds is checked where it is opened, before a step: its
// manifest's token size and ids, its tokenizer (there, and of the manifest's vocabulary), and
// its vocabulary against the model that reads it.
TEST(TokenDataset, ItsManifestTokenizerAndIdsAreCheckedWhenOpened) {
  const std::string dir = fresh_dir("fp8lm_shards_checked");
  ShardManifest m;
  m.vocab_size = 300;
  m.eot = 0;
  for (const char* name : {"train-00000.tok", "val.tok"}) {
    ShardWriter w(dir + "/" + name, 2);
    w.append(std::vector<int32_t>(100, 5));
    w.finish();
  }
  m.train = {{"train-00000.tok", 100}};
  m.validation = {"val.tok", 100};
  write_manifest(dir, m);
  write_tokenizer(dir + "/tokenizer.json", 300);
  EXPECT_EQ(TokenDataset(dir, 16, 1, 300).manifest().vocab_size, 300);
  expect_error([&] { TokenDataset(dir, 16, 1, 299); },
               dir + ": its vocabulary 300 is beyond the model's 299");
  const std::string manifest = file_text(dir + "/manifest.json");
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string t = manifest;
    t.replace(t.find(from), from.size(), to);
    std::ofstream(dir + "/manifest.json") << t;
  };
  struct Damage {
    const char* from;
    const char* to;
    const char* says;
  };
  for (const Damage& d : std::vector<Damage>{
           {"\"token_bytes\": 2", "\"token_bytes\": 3",
            "token_bytes 3 is not a token size shards have"},
           {"\"vocab_size\": 300", "\"vocab_size\": 70000",
            "vocab_size 70000 is not 1 to 65536 (token_bytes 2)"},
           {"\"eot\": 0", "\"eot\": 300", "eot 300 is not a token id (0 to 299)"},
           // Typed fields: a fraction or a number beyond the field's type is named, not cast.
           {"\"eot\": 0", "\"eot\": 0.5", "\"eot\" is 0.5, not an integer"},
           {"\"eot\": 0", "\"eot\": 1e20", "\"eot\" is 1e+20, not an integer"},
           // Found by fuzz_token_shards: converted to int32 with undefined behaviour (UBSan).
           {"\"eot\": 0", "\"eot\": 3.3e39", "\"eot\" is 3.3e+39, not an integer"},
           // A shard's name is a file in the dataset's directory, not a path elsewhere.
           {"\"val.tok\"", "\"../val.tok\"", "'../val.tok' is not a file name in the dataset's"},
           {"\"train-00000.tok\"", "\"/dev/zero\"",
            "'/dev/zero' is not a file name in the dataset's"}}) {
    with(d.from, d.to);
    expect_error([&] { read_manifest(dir); }, d.says);
  }
  with("\"token_bytes\": 2", "\"token_bytes\": 4");
  expect_error([&] { TokenDataset(dir, 16, 1, 300); },
               "train-00000.tok: 2 bytes per token where the manifest says 4");
  std::ofstream(dir + "/manifest.json") << manifest;
  write_tokenizer(dir + "/tokenizer.json", 299);
  expect_error([&] { TokenDataset(dir, 16, 1, 300); },
               "tokenizer.json: 299 tokens where the dataset's manifest says vocab_size 300");
  fs::remove(dir + "/tokenizer.json");
  expect_error([&] { TokenDataset(dir, 16, 1, 300); },
               "token dataset " + dir + ": its tokenizer: " + dir + "/tokenizer.json");
  write_tokenizer(dir + "/tokenizer.json", 300);
  std::string val = file_text(dir + "/val.tok");
  val[32 + 2 * 9] = '\xff';
  val[32 + 2 * 9 + 1] = '\xff';
  std::ofstream(dir + "/val.tok", std::ios::binary) << val;
  expect_error([&] { TokenDataset(dir, 16, 1, 65536); },
               dir +
                   "/val.tok: token 9 (byte offset 50) is id 65535, not below the vocabulary "
                   "size 300");
}

}  // namespace
}  // namespace fp8lm
