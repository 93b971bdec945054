#pragma once
// Ranks agree before they start: every rank of a run must be launched with the same settings,
// or they train different models side by side (a different --seed), wait forever for a
// collective the others never start (a different --steps), or exchange buffers of different
// sizes (a different --d-model). One all-gather of a hash per setting, before anything is built
// or written, finds the first setting that differs and the ranks it differs on.
#include <string>
#include <utility>
#include <vector>

#include "dist/communicator.h"

namespace fp8lm {

// A setting as its flag names it and its value as text ("--d-model", "64").
using NamedValue = std::pair<std::string, std::string>;

// Returns when every rank gave the same names and values (at once in a world of one); throws
// Error otherwise, naming the first setting that differs, this rank's value and the ranks whose
// value differs from rank 0's. Every rank calls it with its settings in the same order.
void require_ranks_agree(Communicator& ranks, const std::vector<NamedValue>& settings);

}  // namespace fp8lm
