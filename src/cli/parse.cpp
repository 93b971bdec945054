#include "cli/parse.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <system_error>

#include "core/json.h"
#include "fp8lm/error.h"
#include "io/run_dir.h"

namespace fp8lm::cli {

uint8_t parse_code(std::string_view token) {
  std::string_view digits = token;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) {
    digits.remove_prefix(2);
    base = 16;
  }
  unsigned value = 0;
  const char* end = digits.data() + digits.size();
  const auto [ptr, ec] = std::from_chars(digits.data(), end, value, base);
  if (digits.empty() || ptr != end || ec != std::errc()) {
    throw Error(fmt::format("'{}' is not a code (expected 0xNN or 0 to 255)", token));
  }
  if (value > 255) throw Error(fmt::format("code '{}' is out of range (0 to 255)", token));
  return static_cast<uint8_t>(value);
}

std::vector<int32_t> parse_token_ids(std::string_view text, int64_t vocab, std::string_view flag) {
  std::vector<int32_t> ids;
  std::istringstream in{std::string(text)};
  for (std::string word; in >> word;) {
    const std::optional<int64_t> v = parse_int(word);
    if (!v || *v < 0 || *v >= vocab) {
      throw Error(fmt::format("{}{}'{}' is not a token id (0 to {})", flag,
                              flag.empty() ? "" : ": ", word, vocab - 1));
    }
    ids.push_back(static_cast<int32_t>(*v));
  }
  return ids;
}

std::string jsonl_text(const std::string& line, const std::string& path, int64_t line_no) {
  const std::string where = fmt::format("{} line {}", path, line_no);
  const nlohmann::json j = parse_json(line, where);
  if (!j.is_object() || !j.contains("text") || !j["text"].is_string())
    throw Error(fmt::format("{} line {}: not a JSON object with a \"text\" string", path, line_no));
  return j["text"].get<std::string>();
}

std::string model_file_path(const std::string& run_or_model) {
  std::string note;
  const std::string path = resolve_model_file(run_or_model, note);
  if (!note.empty()) fmt::print(stderr, "{}\n", note);
  return path;
}

}  // namespace fp8lm::cli
