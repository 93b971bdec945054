#include "core/parse_number.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>
#include <string>
#include <system_error>

#include "fp8lm/error.h"

namespace fp8lm {
namespace {

template <class T>
T parse_real(std::string_view token) {
  std::string_view body = token;
  if (!body.empty() && body[0] == '+') body.remove_prefix(1);
  T value = 0;
  const char* end = body.data() + body.size();
  const auto [ptr, ec] = std::from_chars(body.data(), end, value);
  if (body.empty() || ptr != end || (ec != std::errc() && ec != std::errc::result_out_of_range)) {
    throw Error(fmt::format("'{}' is not a number", token));
  }
  if (ec == std::errc::result_out_of_range) {
    // from_chars leaves value untouched; the long double tells the direction (overflow or
    // underflow).
    value = static_cast<T>(std::strtold(std::string(body).c_str(), nullptr));
  }
  return value;
}

}  // namespace

float parse_float(std::string_view token) {
  return parse_real<float>(token);
}

double parse_double(std::string_view token) {
  return parse_real<double>(token);
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

}  // namespace fp8lm
