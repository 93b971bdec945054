#pragma once
// The character classes GPT-2's pre-tokenizer pattern tests: \p{L} (general categories Lu, Ll,
// Lt, Lm, Lo), \p{N} (Nd, Nl, No), \s (Unicode White_Space, which is what Oniguruma, the regex
// engine of Hugging Face's tokenizers, matches for \s in UTF-8), and everything else. Read from
// ICU's character database.
#include <cstdint>

namespace fp8lm::text {

enum class CharClass : uint8_t { Other, Letter, Number, Space };

CharClass char_class(char32_t c);

}  // namespace fp8lm::text
