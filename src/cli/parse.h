#pragma once
// Strict parsing of command-line values: the whole token must be consumed, or Error names it.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/fp8_dtype.h"
#include "core/parse_number.h"

namespace fp8lm::cli {

using fp8lm::parse_float;  // core/parse_number.h
using fp8lm::parse_int;
// A format's code: 0xNN or decimal, 0 to 255.
uint8_t parse_code(std::string_view token);
// White-space separated token ids ("3 10 17"), each in [0, vocab); Error "<flag>: '<word>' is
// not a token id (0 to vocab-1)" (flag may be empty).
std::vector<int32_t> parse_token_ids(std::string_view text, int64_t vocab, std::string_view flag);
// The "text" string of one JSONL line (a document); Error naming the file and line otherwise.
std::string jsonl_text(const std::string& line, const std::string& path, int64_t line_no);
// A MODEL argument's file (io/run_dir.h resolve_model_file: a run directory stands for its
// model.safetensors, or before that its latest checkpoint's, then said on stderr).
std::string model_file_path(const std::string& run_or_model);

}  // namespace fp8lm::cli
