#pragma once
// UTF-8 as the tokenizers read it: one code point at a time. Text need not be valid UTF-8 (a
// byte-level tokenizer takes any bytes): a byte that does not start a well-formed sequence
// reads as a code point of its own, of length 1, marked invalid.
#include <cstdint>
#include <string>
#include <string_view>

namespace fp8lm::text {

struct CodePoint {
  char32_t value = 0;
  uint8_t length = 1;  // bytes
  bool valid = true;
};

// The code point that starts at s[i] (i < s.size()): the shortest form only, no surrogates,
// nothing past U+10FFFF (as a Rust string, which Hugging Face's tokenizers take, holds).
inline CodePoint next_code_point(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  const uint8_t b0 = byte(i);
  if (b0 < 0x80) return {b0, 1, true};
  int n = 0;
  char32_t c = 0, min = 0;
  if ((b0 & 0xe0) == 0xc0) {
    n = 2, c = b0 & 0x1fu, min = 0x80;
  } else if ((b0 & 0xf0) == 0xe0) {
    n = 3, c = b0 & 0x0fu, min = 0x800;
  } else if ((b0 & 0xf8) == 0xf0) {
    n = 4, c = b0 & 0x07u, min = 0x10000;
  } else {
    return {b0, 1, false};
  }
  if (i + static_cast<size_t>(n) > s.size()) return {b0, 1, false};
  for (int k = 1; k < n; ++k) {
    const uint8_t b = byte(i + static_cast<size_t>(k));
    if ((b & 0xc0) != 0x80) return {b0, 1, false};
    c = (c << 6) | (b & 0x3fu);
  }
  if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return {b0, 1, false};
  return {c, static_cast<uint8_t>(n), true};
}

inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xc0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xe0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  } else {
    out += static_cast<char>(0xf0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
    out += static_cast<char>(0x80 | (c & 0x3f));
  }
}

}  // namespace fp8lm::text
