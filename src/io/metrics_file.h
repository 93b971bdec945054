#pragma once
// A run's metrics.jsonl as a resumed run reads it back: apart from the run directory so that it
// is fuzzed on its own (tests/fuzz/fuzz_metrics.cpp).
#include <cstdint>
#include <string>

namespace fp8lm {

// Keeps the lines of path whose "step" is at most `step` (a resumed run rewrites what came
// after) and drops every line that is not a step's record; nothing when path does not exist.
// Error naming the file when it cannot be read or rewritten.
void truncate_metrics(const std::string& path, int64_t step);

}  // namespace fp8lm
