#pragma once
// A run's metrics.jsonl as a resumed run reads it back: apart from the run directory so that it
// is fuzzed on its own (tests/fuzz/fuzz_metrics.cpp).
#include <cstdint>
#include <string>

namespace fp8lm {

// The lines of path whose "step" is at most `step`, the ones a resumed run keeps (it rewrites
// what came after), without every line that is not a step's record; empty when path does not
// exist. Only reads: a resumed run calls it before writing anything, so an unreadable file
// changes nothing. Error naming the file when it cannot be read.
std::string metrics_kept(const std::string& path, int64_t step);

}  // namespace fp8lm
