#pragma once
// GPT-2's byte-level alphabet (Hugging Face's ByteLevel pre-tokenizer and decoder): each of the
// 256 byte values stands for one printable code point, so that a BPE vocabulary of strings
// covers every byte sequence. Bytes that print (33-126, 161-172, 174-255) stand for
// themselves; the others, in order, for U+0100 onwards (a space, 32, is U+0120 'Ġ').
#include <array>
#include <cstdint>

namespace fp8lm::text {

inline const std::array<char32_t, 256>& byte_to_code_point() {
  static const auto table = [] {
    std::array<char32_t, 256> t{};
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool prints = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
      t[static_cast<size_t>(b)] = prints ? static_cast<char32_t>(b) : next++;
    }
    return t;
  }();
  return table;
}

// The byte a code point stands for, or -1 where it stands for none.
inline int code_point_to_byte(char32_t c) {
  static const auto table = [] {
    std::array<int16_t, 512> t{};
    t.fill(-1);
    for (int b = 0; b < 256; ++b)
      t[byte_to_code_point()[static_cast<size_t>(b)]] = static_cast<int16_t>(b);
    return t;
  }();
  return c < 512 ? table[c] : -1;
}

}  // namespace fp8lm::text
