#pragma once
// What `fp8lm compare` reads back from its runs and writes: each run directory's outcome (from
// its summary.json and metrics.jsonl), and compare.json, the arms' statistics over seeds with
// each arm's gap to the baseline (docs/reference/file-formats.md).
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "train/compare_plan.h"

namespace fp8lm {

struct RunOutcome {
  bool finished = false;  // summary.json is there: the run ended
  bool ok = false;        // ... and ended well
  std::string failure;    // why not, when it did not
  // The mean loss of the last kFinalLossSteps steps (skipped steps' left out), the last
  // validation loss, the stride demo's accuracy: NaN where the run has none.
  double train_loss = NAN, val_loss = NAN, stride_accuracy = NAN;
  double tokens_per_s = NAN, peak_rss_mb = NAN;  // measured: they vary from one run to the next
  int64_t steps = 0, skipped_steps = 0, fp8_fallbacks = 0;
  // Per GEMM role (input, weight, grad_output): the fraction of saturated values (per-tensor
  // recipes) or blocks (block recipes), over every GEMM and every FP8 record of the run.
  std::map<std::string, double> saturated;
  std::string saturated_of;  // "values" or "blocks"; empty for a run without FP8 records
  std::vector<double> loss_steps, losses, val_steps, val_losses;  // the curves, for the page
};

// The run in dir as it stands (a run not yet finished has finished false and whatever its
// metrics.jsonl holds). Error naming the file when one it has cannot be read.
RunOutcome read_run_outcome(const std::string& dir);

struct Comparison {
  std::vector<CompareArm> arms;
  std::vector<uint64_t> seeds;
  std::string baseline;                        // an arm's label
  std::vector<std::vector<std::string>> dirs;  // [arm][seed], relative to the comparison's DIR
  std::vector<std::vector<RunOutcome>> runs;   // [arm][seed]
  // How many runs the invocation that finished it trained at once (compare --jobs): above 1,
  // its runs' tokens/s were taken while they shared the machine.
  int64_t runs_at_once = 1;
};

// compare.json: per arm its runs, each value's mean and standard deviation over seeds, the
// paired gap to the baseline with its 95% interval and whether it is beyond seed noise, and
// the verdict in words; timings under "measured" (with "runs_at_once").
nlohmann::json comparison_json(const Comparison& c);

// The table compare prints and compare.html shows, from compare.json: a header row, then a row
// per arm (means ± standard deviations over seeds, the gap to the baseline with its interval,
// timings, counts, saturation per role).
std::vector<std::vector<std::string>> comparison_table(const nlohmann::json& summary);

// The sentence under that table where its runs shared the machine (compare --jobs), else "".
std::string shared_machine_note(const nlohmann::json& summary);

// compare.html beside compare.json: the table, the verdicts and the loss curves, inline SVG.
std::string comparison_page(const Comparison& c, const nlohmann::json& summary);

}  // namespace fp8lm
