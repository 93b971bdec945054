#include "cli/parse.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>

#include "fp8lm/error.h"

namespace fp8lm::cli {

float parse_float(std::string_view token) {
  std::string_view body = token;
  if (!body.empty() && body[0] == '+') body.remove_prefix(1);
  float value = 0.0f;
  const char* end = body.data() + body.size();
  const auto [ptr, ec] = std::from_chars(body.data(), end, value);
  if (body.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    throw Error(fmt::format("'{}' is not a number", token));
  }
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves value untouched; the double tells the direction (overflow or underflow).
    value = static_cast<float>(std::strtod(std::string(body).c_str(), nullptr));
  }
  return value;
}

std::optional<int64_t> parse_int(std::string_view token) {
  std::string_view body = token;
  if (!body.empty() && body[0] == '+') body.remove_prefix(1);
  int64_t value = 0;
  const char* end = body.data() + body.size();
  const auto [ptr, ec] = std::from_chars(body.data(), end, value);
  if (body.empty() || ptr != end || ec != std::errc()) return std::nullopt;
  return value;
}

uint8_t parse_code(std::string_view token) {
  std::string_view digits = token;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
    base = 16;
  }
  unsigned value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, base);
  if (digits.empty() || ptr != end || ec != std::errc()) {
    throw Error(fmt::format("'{}' is not a code (expected 0xNN or 0 to 255)", token));
  }
  if (value > 255) throw Error(fmt::format("code '{}' is out of range (0 to 255)", token));
  return static_cast<uint8_t>(value);
}

}  // namespace fp8lm::cli
