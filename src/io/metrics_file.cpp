#include "io/metrics_file.h"

#include <fmt/format.h>

#include <filesystem>
#include <span>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"
#include "io/safetensors.h"

namespace fp8lm {

void truncate_metrics(const std::string& path, int64_t step) {
  if (!std::filesystem::exists(path)) return;
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
  write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(kept.data()), kept.size()));
}

}  // namespace fp8lm
