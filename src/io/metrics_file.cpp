#include "io/metrics_file.h"

#include <fmt/format.h>

#include <filesystem>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"

namespace fp8lm {

std::string metrics_kept(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return "";
  InputStream in(path, "");
  std::string kept;
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    const std::string where = fmt::format("{} line {}", path, ++n);
    try {  // a line that is not a step's record is dropped
      if (json_require<int64_t>(parse_json(line, where), "step", where) <= step)
        kept += line + "\n";
    } catch (const Error&) {
    }
  }
  return kept;
}

}  // namespace fp8lm
