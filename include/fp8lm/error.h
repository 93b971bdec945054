#pragma once
// The one error type a user sees: a one-line message naming the input and what is wrong.
// The CLI prints it as "error: <message>" and exits non-zero.
#include <cstdio>
#include <stdexcept>
#include <string>

namespace fp8lm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(printable(message)) {}

 private:
  // A message quotes what the user gave, which may hold any bytes: a NUL would end what()
  // there, a newline or escape would break the one line. Control bytes are written as \xHH.
  static std::string printable(const std::string& message) {
    std::string out;
    out.reserve(message.size());
    for (const char ch : message) {
      const auto byte = static_cast<unsigned char>(ch);
      if (byte >= 0x20 && byte != 0x7f) {
        out += ch;
        continue;
      }
      char hex[5];
      std::snprintf(hex, sizeof hex, "\\x%02x", byte);
      out += hex;
    }
    return out;
  }
};

}  // namespace fp8lm
