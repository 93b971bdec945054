#include "train/setting_values.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <type_traits>

#include "core/parse_number.h"
#include "fp8lm/error.h"

namespace fp8lm {
namespace {

using Text = std::string_view;

// Whether a number's digits (before any exponent) are all zeros: "0", "-0.00", "0e5".
bool writes_zero(Text v) {
  for (const char ch : v) {
    if (ch == 'e' || ch == 'E') break;
    if (ch >= '1' && ch <= '9') return false;
  }
  return true;
}

}  // namespace

int64_t setting_int(Text flag, Text v) {
  const std::optional<int64_t> x = parse_int(v);
  if (!x) throw Error(fmt::format("{} '{}' is not an integer", flag, v));
  return *x;
}

int setting_int32(Text flag, Text v) {
  const int64_t x = setting_int(flag, v);
  if (x < INT32_MIN || x > INT32_MAX) throw Error(fmt::format("{} {} is out of range", flag, v));
  return static_cast<int>(x);
}

template <class T>
T setting_real(Text flag, Text v) {
  T x = 0;
  try {
    x = std::is_same_v<T, float> ? static_cast<T>(parse_float(v)) : static_cast<T>(parse_double(v));
  } catch (const Error&) {
    throw Error(fmt::format("{} '{}' is not a finite number", flag, v));
  }
  if (!std::isfinite(x)) throw Error(fmt::format("{} '{}' is not a finite number", flag, v));
  // A value below the type's smallest becomes 0, and a check would then report "0".
  if (x == 0 && !writes_zero(v))
    throw Error(fmt::format("{} {} is below the smallest {} ({})", flag, v,
                            std::is_same_v<T, float> ? "float" : "double",
                            std::numeric_limits<T>::denorm_min()));
  return x;
}

bool setting_bool(Text flag, Text v) {
  if (v == "true") return true;
  if (v == "false") return false;
  throw Error(fmt::format("{} '{}' is not true or false", flag, v));
}

std::string real_text(float v) {
  return fmt::format("{}", v);
}

std::string real_text(double v) {
  return fmt::format("{}", v);
}
std::string bool_text(bool v) {
  return v ? "true" : "false";
}

template float setting_real<float>(Text, Text);
template double setting_real<double>(Text, Text);

}  // namespace fp8lm
