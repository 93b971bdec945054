#include "io/run_identity.h"

#include <fmt/format.h>

#include <filesystem>
#include <random>

#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/data_fingerprint.h"
#include "io/warning.h"
#include "train/settings.h"

namespace fp8lm {

namespace fs = std::filesystem;

std::string new_run_id() {
  std::random_device random;
  std::string id;
  for (int i = 0; i < 4; ++i) id += fmt::format("{:08x}", random());
  return id;
}

namespace {

// Every setting of a stored config, as this build reads it (defaults filled in, old spellings
// mapped), so that configs written by different versions compare by what they mean.
nlohmann::json settings_of(const std::string& text, const std::string& origin) {
  return settings_json(train_config_from_json(text, origin));
}

}  // namespace

void check_own_checkpoint(const std::string& checkpoint_dir,
                          const std::map<std::string, std::string>& meta, const RunRecord& run) {
  // A run writes its checkpoints as directories of its own; a link is another's, or storage
  // that can change or go without the run knowing.
  if (fs::is_symlink(checkpoint_dir)) {
    throw Error(
        fmt::format("{}: a symbolic link (to {}), not a checkpoint this run wrote; "
                    "remove it to resume",
                    checkpoint_dir, fs::read_symlink(checkpoint_dir).string()));
  }
  const auto id = meta.find("run_id");
  if (id == meta.end()) {
    // (A run without an id of its own was warned of once, as a whole.)
    if (!run.id.empty())
      warn(
          fmt::format("{}: written by an fp8lm before run ids: taken as this run's own because "
                      "its config is the run's",
                      checkpoint_dir));
  } else if (id->second != run.id) {
    throw Error(fmt::format(
        "{}: a checkpoint of another run (run id {}; this run's is {}); remove it to resume",
        checkpoint_dir, id->second.substr(0, 64),
        run.id.empty() ? "none, written by an older fp8lm" : run.id));
  }
  if (!meta.count("config"))
    throw Error(fmt::format("{}/model.safetensors: not an fp8lm checkpoint", checkpoint_dir));
  const nlohmann::json ours = settings_of(run.config.dump(), "config.json");
  const nlohmann::json its = settings_of(meta.at("config"), checkpoint_dir);
  for (const auto& [key, value] : ours.items()) {
    if (its.contains(key) && its[key] == value) continue;
    throw Error(fmt::format(
        "{}: not this run's checkpoint: its {} is {}, the run's config.json says {}",
        checkpoint_dir, key, its.contains(key) ? its[key].dump() : "unset", value.dump()));
  }
}

void check_run_data(const std::string& run_dir, const RunRecord& run, bool allow_change) {
  if (!run.config.contains("data") || !run.config["data"].is_string()) return;
  const std::string path = run.config["data"].get<std::string>();
  if (path.empty()) return;  // the stride task
  std::error_code ec;
  if (!fs::exists(path, ec)) {
    throw Error(fmt::format("{}: the run's training data {} is missing; put it back to resume",
                            run_dir, path));
  }
  if (run.data.is_null()) {
    warn(
        fmt::format("{}: written by an fp8lm that kept no fingerprint of its data: a change to "
                    "{} cannot be noticed",
                    run_dir, path));
    return;
  }
  const std::string changes = data_changes(run.data, data_fingerprint(path));
  if (changes.empty()) return;
  if (!allow_change) {
    throw Error(
        fmt::format("{}: the training data {} changed since the run recorded it ({}); "
                    "--allow-data-change resumes on it as it is now",
                    run_dir, path, changes));
  }
  warn(fmt::format("resuming on {} as it is now, changed since the run recorded it ({})", path,
                   changes));
}

}  // namespace fp8lm
