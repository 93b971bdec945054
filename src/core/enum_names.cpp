#include "core/enum_names.h"

#include <fmt/format.h>

#include "fp8lm/error.h"

namespace fp8lm {

std::string choice_list(const std::vector<std::string_view>& names) {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out.append(i == 0 ? "" : i + 1 == names.size() ? " or " : ", ").append(names[i]);
  return out;
}

void throw_unknown_name(std::string_view what, std::string_view name,
                        const std::vector<std::string_view>& choices) {
  throw Error(fmt::format("unknown {} '{}' (expected {})", what, name, choice_list(choices)));
}

}  // namespace fp8lm
