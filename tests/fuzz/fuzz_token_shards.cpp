// libFuzzer target: a token dataset directory (fp8lm data prepare's manifest.json and shards)
// either opens, with every batch, validation window and decode in bounds, or is refused with
// fp8lm::Error — never a crash, hang, leak or undefined behaviour (ASan + UBSan). The input is
// manifest.json, "\n#shard\n", train-00000.tok's bytes, "\n#shard\n", val.tok's bytes (the train
// shard's when there is no third part); beside them a byte-level tokenizer.json of 257 tokens.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "fp8lm/error.h"
#include "fuzz_files.h"
#include "text/bpe_tokenizer.h"
#include "text/byte_level.h"
#include "train/token_shards.h"

namespace {

std::string utf8(char32_t c) {  // the byte-level alphabet's code points are below 0x800
  if (c < 0x80) return std::string(1, static_cast<char>(c));
  return {static_cast<char>(0xC0 | (c >> 6)), static_cast<char>(0x80 | (c & 0x3F))};
}

// <|endoftext|> as id 0, then the 256 bytes: what `fp8lm tokenizer train --vocab-size 257` learns.
std::string byte_tokenizer_json() {
  nlohmann::json vocab = nlohmann::json::object();
  vocab["<|endoftext|>"] = 0;
  for (int b = 0; b < 256; ++b) vocab[utf8(fp8lm::text::byte_to_code_point()[b])] = b + 1;
  return nlohmann::json{
      {"added_tokens", {{{"id", 0}, {"content", "<|endoftext|>"}, {"special", true}}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}}
      .dump();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::string tokenizer = byte_tokenizer_json();
  const std::string& dir = fp8lm::fuzz::scratch_dir("token_shards");
  const auto parts = fp8lm::fuzz::split(std::string_view(reinterpret_cast<const char*>(data), size),
                                        "\n#shard\n", 3);
  fp8lm::fuzz::write_file(dir + "/manifest.json", parts[0]);
  fp8lm::fuzz::write_file(dir + "/train-00000.tok", parts.size() > 1 ? parts[1] : "");
  fp8lm::fuzz::write_file(dir + "/val.tok", parts.size() > 2 ? parts[2] : parts.back());
  fp8lm::fuzz::write_file(dir + "/tokenizer.json", tokenizer);
  try {
    fp8lm::TokenDataset ds(dir, /*seq_len=*/4, /*seed=*/1, /*model_vocab=*/512);
    (void)ds.next_train(2, 4);
    ds.restore(ds.state());
    (void)ds.next_train(1, 4);
    (void)ds.validation(2, 4, 3);
    (void)ds.decode(ds.validation_prompt(3));
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
