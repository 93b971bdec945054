#pragma once
// Strict parsing of numbers written by people (flags, config files): the whole text must be
// one number.
#include <cstdint>
#include <optional>
#include <string_view>

namespace fp8lm {

// A float as written (decimal or scientific, inf, nan; leading + allowed); Error "'x' is not a
// number" otherwise. Magnitudes beyond float's range become ±inf, below its smallest subnormal
// ±0, as a float cast would.
float parse_float(std::string_view token);
// A double, as parse_float.
double parse_double(std::string_view token);
// A whole decimal integer (leading + or - allowed); nullopt unless the token is exactly one.
std::optional<int64_t> parse_int(std::string_view token);

}  // namespace fp8lm
