#include "core/json.h"

#include "core/input_file.h"

namespace fp8lm {
namespace {

// The deepest nesting of the text's arrays and objects, counted outside strings, as far as
// the first level past the limit (whose line is returned in `line`); invalid text is counted
// the same way, which bounds what the parser would build before it stops at the error.
int nesting_depth(std::string_view text, int limit, int64_t& line) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  line = 1;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '\n') ++line;
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, which may be a quote
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
      if (deepest > limit) return deepest;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

// nlohmann's message without its "[json.exception.parse_error.101] " tag.
std::string plain(const nlohmann::json::exception& e) {
  std::string_view m = e.what();
  if (m.starts_with("[json.exception.")) {
    const size_t end = m.find("] ");
    if (end != std::string_view::npos) m.remove_prefix(end + 2);
  }
  return std::string(m);
}

}  // namespace

nlohmann::json parse_json(std::string_view text, std::string_view what) {
  int64_t line = 0;
  if (nesting_depth(text, kMaxJsonDepth, line) > kMaxJsonDepth)
    throw Error(
        fmt::format("{}: JSON nested deeper than {} levels (line {})", what, kMaxJsonDepth, line));
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::out_of_range& e) {
    // 406: a number beyond a double's range ("number overflow parsing '1e400'").
    throw Error(fmt::format("{}: {} (beyond a double's range)", what, plain(e)));
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: not valid JSON ({})", what, plain(e)));
  }
}

nlohmann::json read_json_file(const std::string& path, int64_t max_bytes) {
  return parse_json(read_input_file(path, "", max_bytes), path);
}

namespace json_detail {

std::string excerpt(const nlohmann::json& v) {
  std::string s = v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (s.size() > 40) s = s.substr(0, 37) + "...";
  return s;
}

}  // namespace json_detail

}  // namespace fp8lm
