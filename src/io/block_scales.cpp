#include "io/block_scales.h"

#include <fmt/format.h>

#include <cfloat>
#include <charconv>
#include <cstdint>
#include <string_view>

#include "fp8lm/error.h"

namespace fp8lm {
namespace {

using Json = nlohmann::json;

constexpr int64_t kMostBlocks = int64_t{1} << 53;

// A count as written: an integer from 0 to most (not a float, nor one that wraps).
int64_t count_of(const Json& v, int64_t most, const std::string& where) {
  const bool ok = (v.is_number_unsigned() && v.get<uint64_t>() <= static_cast<uint64_t>(most)) ||
                  (v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= most);
  if (!ok) throw Error(fmt::format("{} is {}, not an integer from 0 to {}", where, v.dump(), most));
  return v.get<int64_t>();
}

int exponent_of(std::string_view key, const std::string& where) {
  int e = 0;
  const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), e);
  if (ec != std::errc() || end != key.data() + key.size() || e < kMinBlockExponent ||
      e > kMaxBlockExponent)
    throw Error(fmt::format("{}: exponent '{}' is not an integer from {} to {}", where, key,
                            kMinBlockExponent, kMaxBlockExponent));
  return e;
}

}  // namespace

BlockScaleRecord block_scales_from_json(const Json& j, const std::string& origin) {
  if (!j.is_object()) throw Error(fmt::format("{}: block_scales is not a JSON object", origin));
  BlockScaleRecord out;
  for (const auto& [gemm, roles] : j.items()) {
    if (!roles.is_object())
      throw Error(fmt::format("{}: block_scales '{}' is not an object of roles", origin, gemm));
    for (const auto& [role, role_stats] : roles.items()) {
      const std::string where = fmt::format("{}: block_scales {} {}", origin, gemm, role);
      const Json& st = role_stats;  // a lambda may not capture a structured binding (clang 14)
      if (!st.is_object()) throw Error(fmt::format("{} is not an object", where));
      const auto field = [&](const char* key) -> const Json& {
        if (!st.contains(key)) throw Error(fmt::format("{} has no '{}'", where, key));
        return st[key];
      };
      BlockScaleStats s;
      s.blocks = count_of(field("blocks"), kMostBlocks, where + " blocks");
      s.zero_blocks = count_of(field("zero"), s.blocks, where + " zero");
      s.saturated_blocks = count_of(field("saturated"), s.blocks, where + " saturated");
      s.flushed_blocks = count_of(field("flushed"), s.blocks, where + " flushed");
      const Json& exponents = field("exponents");
      if (!exponents.is_object()) throw Error(fmt::format("{} exponents is not an object", where));
      int64_t total = 0;
      for (const auto& [key, n] : exponents.items()) {
        const int e = exponent_of(key, where);
        s.exponents[e] = count_of(n, s.blocks - total, fmt::format("{} exponent {}", where, key));
        total += s.exponents[e];
      }
      const Json& scale = field("tensor_scale");
      if (!scale.is_number() || !(scale.get<double>() > 0 && scale.get<double>() <= FLT_MAX))
        throw Error(
            fmt::format("{} tensor_scale is {}, not a positive number", where, scale.dump()));
      s.tensor_scale = scale.get<float>();
      out[gemm][role] = std::move(s);
    }
  }
  return out;
}

}  // namespace fp8lm
