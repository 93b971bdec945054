// libFuzzer target: a tokenizer.json (Hugging Face's format, as `tokenizer train` writes it and
// `data prepare --tokenizer` reads it) either loads into a tokenizer whose encode and decode
// stay in bounds, or is refused with fp8lm::Error — never a crash, hang, leak or undefined
// behaviour (ASan + UBSan).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fp8lm/error.h"
#include "fuzz_files.h"
#include "text/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fp8lm::fuzz::scratch_dir("tokenizer") + "/tokenizer.json";
  fp8lm::fuzz::write_file(path, std::string_view(reinterpret_cast<const char*>(data), size));
  try {
    const auto tok = fp8lm::text::BpeTokenizer::from_hf_json(path);
    std::vector<int32_t> ids =
        tok.encode("Hello, w\xC3\xB6rld <|endoftext|> \xE6\x97\xA5 1234\n\t ");
    (void)tok.decode(ids);
    (void)tok.decode(ids, /*skip_special=*/true);
    ids.push_back(static_cast<int32_t>(tok.vocab_size()) + 7);  // a model's padded vocabulary
    (void)tok.decode_generated(ids);
    if (tok.vocab_size() > 0) (void)tok.token(0);
  } catch (const fp8lm::Error&) {
  }
  return 0;
}
