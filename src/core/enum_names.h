#pragma once
// An enum's names as one table, in enumerator order (the enum counts from 0): the name of each,
// the parser with its error ("unknown recipe 'x' (expected delayed, current, block, mxfp8 or
// nvfp4)") and the list of choices all come from it, so no switch repeats the names.
#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm {

// "a, b or c".
std::string choice_list(const std::vector<std::string_view>& names);
// Error "unknown <what> '<name>' (expected <choice_list(choices)>)".
[[noreturn]] void throw_unknown_name(std::string_view what, std::string_view name,
                                     const std::vector<std::string_view>& choices);

template <class E, size_t N>
struct EnumNames {
  std::string_view what;  // the kind of thing named, for the error: "precision"
  std::array<std::string_view, N> names;

  constexpr std::string_view name(E e) const {
    const auto i = static_cast<size_t>(e);
    return i < N ? names[i] : "?";
  }
  E parse(std::string_view s) const {
    for (size_t i = 0; i < N; ++i)
      if (names[i] == s) return static_cast<E>(i);
    throw_unknown_name(what, s, choices());
  }
  std::vector<std::string_view> choices() const { return {names.begin(), names.end()}; }
};

}  // namespace fp8lm
