#pragma once
// One JSON reader for every JSON the program reads (issue 30): nesting bounded before the
// parser sees the text (nlohmann's dump and copies recurse, so a deep document would overflow
// the stack), a number beyond a double's range refused, the parser's errors as one line naming
// the input, and typed access to fields whose errors name the input and the key.
#include <fmt/format.h>

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "fp8lm/error.h"

namespace fp8lm {

// Far deeper than any file the program reads (a tokenizer.json nests 4 levels, an HF config 3).
inline constexpr int kMaxJsonDepth = 64;

// The JSON value in `text`; Error "<what>: ..." (what: the file, or "<file> line N") when it is
// not valid JSON, nests deeper than kMaxJsonDepth, or holds a number beyond a double's range.
nlohmann::json parse_json(std::string_view text, std::string_view what);

// The JSON file at path, read through InputFile (core/input_file.h) with the given bound.
nlohmann::json read_json_file(const std::string& path, int64_t max_bytes);

namespace json_detail {

// A value for an error: short, on one line.
std::string excerpt(const nlohmann::json& v);

template <class T>
std::string kind() {
  if constexpr (std::is_same_v<T, bool>) {
    return "true or false";
  } else if constexpr (std::is_same_v<T, std::string>) {
    return "a string";
  } else if constexpr (std::is_floating_point_v<T>) {
    return "a number";
  } else {
    return fmt::format("an integer from {} to {}", std::numeric_limits<T>::min(),
                       std::numeric_limits<T>::max());
  }
}

template <class T>
bool fits(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else {
    static_assert(std::is_integral_v<T>);
    if (v.is_number_unsigned())
      return v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max());
    if (!v.is_number_integer()) return false;
    const int64_t x = v.get<int64_t>();
    if constexpr (std::is_signed_v<T>) {
      return x >= std::numeric_limits<T>::min() &&
             x <= static_cast<int64_t>(std::numeric_limits<T>::max());
    } else {
      return x >= 0 && static_cast<uint64_t>(x) <= std::numeric_limits<T>::max();
    }
  }
}

}  // namespace json_detail

// v as T (bool, std::string, a floating or integer type in its range); Error
// "<what> is <v>, not <an integer from 0 to ...>" otherwise. `what` names the value.
template <class T>
T json_as(const nlohmann::json& v, std::string_view what) {
  if (!json_detail::fits<T>(v))
    throw Error(
        fmt::format("{} is {}, not {}", what, json_detail::excerpt(v), json_detail::kind<T>()));
  return v.get<T>();
}

// obj[key] as T; `fallback` when obj has no such key or it is null. `what` names obj (a file,
// "<file> line 3"); the error names the key: "<what>: \"key\" is ..., not ...".
template <class T>
T json_value(const nlohmann::json& obj, std::string_view key, const T& fallback,
             std::string_view what) {
  if (!obj.is_object()) throw Error(fmt::format("{}: not a JSON object", what));
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return fallback;
  return json_as<T>(*it, fmt::format("{}: \"{}\"", what, key));
}

// obj[key] as T; Error "<what>: no \"key\"" when it is absent or null.
template <class T>
T json_require(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  if (!obj.is_object()) throw Error(fmt::format("{}: not a JSON object", what));
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) throw Error(fmt::format("{}: no \"{}\"", what, key));
  return json_as<T>(*it, fmt::format("{}: \"{}\"", what, key));
}

}  // namespace fp8lm
