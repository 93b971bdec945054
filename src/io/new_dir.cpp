#include "io/new_dir.h"

#include <fmt/format.h>

#include <filesystem>

#include "fp8lm/error.h"

namespace fp8lm {

namespace fs = std::filesystem;

void require_new_or_empty_dir(const std::string& dir, const std::string& label) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !(fs::is_directory(dir, ec) && fs::is_empty(dir, ec)))
    throw Error(fmt::format("{}: exists and is not an empty directory; not overwriting it", label));
}

void make_new_or_empty_dir(const std::string& dir, const std::string& label) {
  require_new_or_empty_dir(dir, label);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error(fmt::format("{}: cannot create the directory ({})", label, ec.message()));
}

}  // namespace fp8lm
