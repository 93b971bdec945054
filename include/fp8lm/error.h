#pragma once
// The one error type a user sees: a one-line message naming the input and what is wrong.
// The CLI prints it as "error: <message>" and exits non-zero.
#include <stdexcept>
#include <string>

namespace fp8lm {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

}  // namespace fp8lm
