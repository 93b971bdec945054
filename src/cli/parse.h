#pragma once
// Strict parsing of command-line values: the whole token must be consumed, or Error names it.
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/fp8_dtype.h"

namespace fp8lm::cli {

// A float as written (decimal or scientific, inf, nan; leading + allowed). Magnitudes beyond
// float's range become ±inf, below its smallest subnormal ±0, as a float cast would.
float parse_float(std::string_view token);
// A whole decimal integer (leading + or - allowed); nullopt unless the token is exactly one.
std::optional<int64_t> parse_int(std::string_view token);
// A format's code: 0xNN or decimal, 0 to 255.
uint8_t parse_code(std::string_view token);

}  // namespace fp8lm::cli
