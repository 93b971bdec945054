#pragma once
// Which run a checkpoint belongs to, and whether the run's data is still what it trained on.
// Each run gets a random id at its start, kept in its config.json ("run": {"id"}) and written
// into every checkpoint and model file it writes ("run_id"), beside the fingerprint of its data
// (io/data_fingerprint.h): a resume takes only the run's own checkpoints, never another run's
// copied or linked into checkpoints/, and notices data that changed under it. Runs written
// before ids resume with a warning, their checkpoints checked by their config alone.
#include <map>
#include <nlohmann/json.hpp>
#include <string>

namespace fp8lm {

// 32 hex digits from the system's random source.
std::string new_run_id();

// What a run directory's config.json says of the run.
struct RunRecord {
  std::string id;                 // empty: written by an fp8lm before run ids
  nlohmann::json data = nullptr;  // the fingerprint of its data; null when none was recorded
  nlohmann::json config;          // its settings, as config.json holds them
};

// Error unless the checkpoint directory (in run_dir/checkpoints/, `meta` its model file's
// metadata) is the run's own: a directory rather than a link, of the run's id, built from the
// run's config. Names both ids, or the first setting that differs.
void check_own_checkpoint(const std::string& checkpoint_dir,
                          const std::map<std::string, std::string>& meta, const RunRecord& run);

// The run's training data (config.json's "data") checked against its recorded fingerprint:
// Error naming the data when it is missing, or when it changed and allow_change is false (then a
// warning says what changed).
void check_run_data(const std::string& run_dir, const RunRecord& run, bool allow_change);

}  // namespace fp8lm
