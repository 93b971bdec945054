#include "text/char_class.h"

#include <unicode/uchar.h>

#include <array>

namespace fp8lm::text {
namespace {

CharClass classify(char32_t c) {
  const auto u = static_cast<UChar32>(c);
  if (u_isUWhiteSpace(u)) return CharClass::Space;
  switch (u_charType(u)) {
    case U_UPPERCASE_LETTER:
    case U_LOWERCASE_LETTER:
    case U_TITLECASE_LETTER:
    case U_MODIFIER_LETTER:
    case U_OTHER_LETTER:
      return CharClass::Letter;
    case U_DECIMAL_DIGIT_NUMBER:
    case U_LETTER_NUMBER:
    case U_OTHER_NUMBER:
      return CharClass::Number;
    default:
      return CharClass::Other;
  }
}

// The Basic Multilingual Plane in a table (64 KiB, made once): nearly all text stays in it, and
// a lookup there costs less than ICU's trie walk and switch.
const std::array<CharClass, 0x10000>& bmp_table() {
  static const auto table = [] {
    std::array<CharClass, 0x10000> t{};
    for (char32_t c = 0; c < 0x10000; ++c) t[c] = classify(c);
    return t;
  }();
  return table;
}

}  // namespace

CharClass char_class(char32_t c) {
  return c < 0x10000 ? bmp_table()[c] : classify(c);
}

}  // namespace fp8lm::text
