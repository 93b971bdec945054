#pragma once
// "Did you mean ...?": the known name nearest to a mistyped one.
#include <string>
#include <string_view>
#include <vector>

namespace fp8lm {

// The candidate with the fewest edits (insert, delete, replace a character) from word, when
// that is at most a third of its length (and at least 2); empty when none is that close.
std::string closest_name(std::string_view word, const std::vector<std::string>& candidates);

}  // namespace fp8lm
