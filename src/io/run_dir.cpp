#include "io/run_dir.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/input_file.h"
#include "core/json.h"
#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/checkpoint.h"
#include "io/data_fingerprint.h"
#include "io/metrics_file.h"
#include "io/report.h"
#include "io/warning.h"
#include "nn/fp8_slots.h"

namespace fp8lm {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

Json fp8_snapshot(GPT& model) {
  Json j = Json::object();
  for (const Fp8SlotState& st : fp8_slot_states(model)) {
    const float newest = st.amax_history.back();
    j[st.gemm][st.slot] = {{"scale", st.scale},
                           {"amax", std::isfinite(newest) ? Json(newest) : Json(nullptr)},
                           {"saturated", st.saturated_fraction},
                           {"flushed", st.flushed_fraction}};
  }
  return j;
}

// A checkpoint being written; renamed to its step-NNNNNN name once whole.
constexpr const char* kPartialPrefix = ".partial-";

// What a process killed mid-checkpoint left behind.
void remove_partial_checkpoints(const std::string& run_dir) {
  const std::string root = run_dir + "/checkpoints";
  if (!fs::is_directory(root)) return;
  std::vector<fs::path> partial;
  for (const auto& e : fs::directory_iterator(root))
    if (e.path().filename().string().starts_with(kPartialPrefix)) partial.push_back(e.path());
  for (const fs::path& p : partial) fs::remove_all(p);
}

CheckpointInfo checkpoint_info(const Trainer& trainer, const RunStamp& stamp) {
  return {trainer.config(),
          trainer.precision().label(),
          trainer.precision().precision == Precision::Fp8,
          trainer.steps_done(),
          trainer.skipped_steps(),
          trainer.fp8_fallbacks(),
          trainer.ranks().size(),
          stamp.run_id,
          stamp.data};
}

}  // namespace

namespace {

// A checkpoint that is not the run's own: resume stops rather than fall back past it.
class ForeignCheckpoint : public Error {
 public:
  using Error::Error;
};

// What checkpoints/latest names, if it is one of the run's own step-NNNNNN directories (never a
// path elsewhere); else why not.
std::string latest_name(const std::string& run_dir, std::string& why_not) {
  const std::string latest = run_dir + "/checkpoints/latest";
  if (!fs::exists(latest)) {
    why_not = "checkpoints/latest is missing";
    return "";
  }
  std::string name;
  try {
    name = read_input_file(latest, "", kLineFileBytes);
  } catch (const Error& e) {
    why_not = e.what();
    return "";
  }
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (!checkpoint_step(name)) {
    why_not = fmt::format("checkpoints/latest names '{}', not one of this run's checkpoints",
                          name.substr(0, 80));
    return "";
  }
  if (!fs::is_directory(run_dir + "/checkpoints/" + name)) {
    why_not = fmt::format("checkpoints/latest names {}, which is gone", name);
    return "";
  }
  return name;
}

}  // namespace

std::optional<int64_t> checkpoint_step(const std::string& name) {
  // At most 18 digits: any such number fits int64_t.
  if (name.size() <= 5 || name.size() > 23 || !name.starts_with("step-") ||
      name.find_first_not_of("0123456789", 5) != std::string::npos)
    return std::nullopt;
  return std::stoll(name.substr(5));
}

std::vector<std::string> checkpoint_names(const std::string& run_dir) {
  std::vector<std::pair<int64_t, std::string>> steps;
  const std::string root = run_dir + "/checkpoints";
  if (!fs::is_directory(root)) return {};
  for (const auto& e : fs::directory_iterator(root)) {
    const std::string name = e.path().filename().string();
    if (const auto step = checkpoint_step(name); step && e.is_directory())
      steps.emplace_back(*step, name);
  }
  // By step, not as text: step-1000000 is newer than step-999999.
  std::sort(steps.rbegin(), steps.rend());
  std::vector<std::string> names;
  for (const auto& [step, name] : steps) names.push_back(name);
  return names;
}

std::string latest_checkpoint(const std::string& run_dir) {
  std::string why_not;
  const std::string name = latest_name(run_dir, why_not);
  if (name.empty())
    throw Error(fmt::format("{}: no checkpoint to resume from: {}", run_dir, why_not));
  return run_dir + "/checkpoints/" + name;
}

ResumedRun resume_newest_checkpoint(const std::string& run_dir) {
  const RunRecord run = read_run_record(run_dir);
  if (run.id.empty()) {
    warn(
        fmt::format("{}: written by an fp8lm before run ids: its checkpoints are taken as its "
                    "own when their config is the run's",
                    run_dir));
  }
  std::string why_not;
  std::vector<std::string> names = checkpoint_names(run_dir);
  const std::string latest = latest_name(run_dir, why_not);
  if (!latest.empty()) {
    std::erase(names, latest);
    names.insert(names.begin(), latest);
  }
  std::vector<std::string> failures;
  for (const std::string& name : names) {
    const std::string dir = run_dir + "/checkpoints/" + name;
    try {
      // (A link is refused before anything is read through it.)
      const auto meta = fs::is_symlink(dir)
                            ? std::map<std::string, std::string>{}
                            : Safetensors::read_metadata(dir + "/model.safetensors");
      try {
        check_own_checkpoint(dir, meta, run);
      } catch (const Error& e) {
        throw ForeignCheckpoint(e.what());
      }
      return {resume_trainer(dir), dir, why_not};
    } catch (const ForeignCheckpoint&) {
      throw;
    } catch (const Error& e) {
      failures.push_back(fmt::format("{} does not load: {}", name, e.what()));
      if (why_not.empty()) why_not = failures.back();
    }
  }
  if (failures.empty()) failures.push_back(why_not.empty() ? "no checkpoints" : why_not);
  throw Error(
      fmt::format("{}: no checkpoint to resume from: {}", run_dir, fmt::join(failures, "; ")));
}

namespace {
// This process's largest resident set so far (a resumed run: since it resumed).
double peak_rss_mb() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux counts kilobytes
}
}  // namespace

void write_summary(const std::string& dir, const Trainer& trainer, const TrainResult& r) {
  const TrainConfig& c = trainer.config();
  Json j = {{"precision", r.precision.label()},
            {"precision_reason", r.precision.reason},
            {"recipe", r.precision.precision == Precision::Fp8
                           ? trainer.recipe_line() + (c.fp8_weights ? " fp8_weights" : "")
                           : "none"},
            {"steps", r.steps},
            {"seconds", r.seconds},
            {"tokens_per_s", r.tokens_per_s},
            {"final_loss", r.final_loss},
            {"skipped_steps", r.skipped_steps},
            {"fp8_fallbacks", fp8_fallbacks_json(r.fp8_fallbacks)},
            {"parameters", c.model.parameter_count()},
            {"world_size", trainer.ranks().size()},
            {"peak_rss_mb", peak_rss_mb()}};
  // A run that did not end well says why; "ok" is what a script checks.
  j["ok"] = r.failure.empty();
  if (!r.failure.empty()) j["failure"] = r.failure;
  if (r.stride_task) {
    j["stride_accuracy"] = r.stride_accuracy;
  } else {
    j["val_loss"] = r.val_loss;
  }
  write_text_atomic(dir + "/summary.json", j.dump(2) + "\n");
}

SafetensorsWriter trainer_model_file(Trainer& trainer, const RunStamp& stamp) {
  return model_file(trainer.model(), checkpoint_info(trainer, stamp));
}

void save_trainer(Trainer& trainer, const std::string& checkpoint_dir, const RunStamp& stamp) {
  GPT& model = trainer.model();
  save_checkpoint(checkpoint_dir, model, trainer.optimizer(), checkpoint_info(trainer, stamp),
                  trainer.progress());
}

std::unique_ptr<Trainer> resume_trainer(const std::string& checkpoint_dir) {
  auto trainer = std::make_unique<Trainer>(checkpoint_config(checkpoint_dir));
  GPT& model = trainer->model();
  trainer->restore_progress(load_checkpoint(checkpoint_dir, model, trainer->optimizer()));
  trainer->refresh_fp8_weights();
  return trainer;
}

RunSettings read_run_settings(const std::string& dir) {
  RunSettings s;
  const std::string path = dir + "/config.json";
  if (!fs::exists(path)) return s;
  const Json j = read_json_file(path, kJsonFileBytes);
  if (!j.is_object() || !j.contains("run") || !j["run"].is_object()) return s;
  const Json& run = j["run"];
  if (run.contains("checkpoint_every") && run["checkpoint_every"].is_number_integer())
    s.checkpoint_every = std::max<int64_t>(0, run["checkpoint_every"].get<int64_t>());
  if (run.contains("keep_checkpoints") && run["keep_checkpoints"].is_number_integer())
    s.keep_checkpoints = static_cast<int>(
        std::clamp(run["keep_checkpoints"].get<int64_t>(), int64_t{1}, int64_t{INT32_MAX}));
  if (run.contains("tensorboard") && run["tensorboard"].is_boolean())
    s.tensorboard = run["tensorboard"].get<bool>();
  return s;
}

RunRecord read_run_record(const std::string& run_dir) {
  const std::string path = run_dir + "/config.json";
  const Json j = read_json_file(path, kJsonFileBytes);
  if (!j.is_object()) throw Error(fmt::format("{}: not a JSON object", path));
  RunRecord r;
  r.config = j;
  if (!j.contains("run") || !j["run"].is_object()) return r;
  const Json& run = j["run"];
  if (run.contains("id")) {
    if (!run["id"].is_string() || run["id"].get<std::string>().empty())
      throw Error(fmt::format("{}: its run id is not a string", path));
    r.id = run["id"].get<std::string>();
  }
  if (run.contains("data")) r.data = run["data"];
  return r;
}

std::string resolve_model_file(const std::string& run_or_model, std::string& note) {
  note.clear();
  if (!fs::is_directory(run_or_model)) return run_or_model;
  const std::string final_model = run_or_model + "/model.safetensors";
  if (fs::exists(final_model)) return final_model;
  // The checkpoint `latest` names, else the newest there is (latest lost, the run killed).
  std::string why_not, name = latest_name(run_or_model, why_not);
  if (name.empty()) {
    const std::vector<std::string> names = checkpoint_names(run_or_model);
    if (names.empty()) return final_model;  // not a run, or one without a checkpoint yet
    name = names.front();
  }
  const std::string path = run_or_model + "/checkpoints/" + name + "/model.safetensors";
  note = fmt::format("using {}: {} has no model.safetensors yet (a run still training or stopped)",
                     path, run_or_model);
  return path;
}

RunDirectory::RunDirectory(std::string dir, Trainer& trainer, RunSettings settings)
    : dir_(std::move(dir)), keep_(settings.keep_checkpoints) {
  const std::string metrics_path = dir_ + "/metrics.jsonl";
  const std::string kept = metrics_kept(metrics_path, trainer.steps_done());
  fs::create_directories(dir_);
  remove_partial_checkpoints(dir_);
  // A resumed run keeps its id; a new one, or one from before ids, is given one now.
  if (fs::exists(dir_ + "/config.json")) stamp_.run_id = read_run_record(dir_).id;
  if (stamp_.run_id.empty()) stamp_.run_id = new_run_id();
  const Json data = data_fingerprint(trainer.config().data);
  if (!data.is_null()) stamp_.data = data.dump();
  Json config = Json::parse(train_config_to_json(trainer.config()));
  config["run"] = {{"checkpoint_every", settings.checkpoint_every},
                   {"keep_checkpoints", settings.keep_checkpoints},
                   {"tensorboard", settings.tensorboard},
                   {"world_size", trainer.ranks().size()},
                   {"id", stamp_.run_id}};
  if (!data.is_null()) config["run"]["data"] = data;
  write_text_atomic(dir_ + "/config.json", config.dump(2) + "\n");
  write_text_atomic(metrics_path, kept);
  metrics_fd_ = ::open(metrics_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
  if (metrics_fd_ < 0)
    throw Error(fmt::format("{}: cannot open: {}", metrics_path, std::strerror(errno)));
  if (settings.tensorboard) tensorboard_ = std::make_unique<TensorBoardWriter>(dir_ + "/tb");
}

RunDirectory::~RunDirectory() {
  if (metrics_fd_ >= 0) ::close(metrics_fd_);
}

void RunDirectory::step(Trainer& trainer, const StepRecord& record) {
  const StepStats& s = record.stats;
  Json line = {{"step", s.step},
               {"loss", s.loss},
               {"lr", s.lr},
               {"grad_norm", s.grad_norm},
               {"tokens_per_s", s.step_tokens_per_s},
               {"seconds", s.seconds}};
  if (trainer.ranks().size() > 1) {
    line["comm_seconds"] = s.comm_seconds;
    line["comm_bytes"] = s.comm_bytes;
  }
  if (s.skipped) line["skipped"] = true;  // its loss (NaN or Inf) is written as null
  if (s.skipped_steps > 0) line["skipped_steps"] = s.skipped_steps;
  if (!s.fp8_fallbacks.empty()) line["fp8_fallback"] = fp8_fallbacks_json(s.fp8_fallbacks);
  if (record.stats.val_loss) line["val_loss"] = *record.stats.val_loss;
  if (record.fp8_snapshot) {
    if (trainer.config().recipe.block_scaled()) {
      if (const Json b = block_scales_json(trainer.model()); !b.is_null()) line["block_scales"] = b;
    } else {
      line["fp8"] = fp8_snapshot(trainer.model());
    }
  }
  append_whole(metrics_fd_, dir_ + "/metrics.jsonl", line.dump() + "\n");
  if (tensorboard_) tensorboard_->scalars(s.step, line);
}

void RunDirectory::checkpoint(Trainer& trainer) {
  const std::string root = dir_ + "/checkpoints";
  const std::string name = fmt::format("step-{:06d}", trainer.steps_done());
  // Written under a name resume never looks at, then renamed whole: a run killed mid-write
  // leaves no step directory holding one file of its two, and a failed write leaves nothing.
  const std::string partial = root + "/" + kPartialPrefix + name;
  fs::remove_all(partial);
  try {
    save_trainer(trainer, partial, stamp_);
  } catch (...) {
    std::error_code ignored;  // the write's own error is the one to report
    fs::remove_all(partial, ignored);
    throw;
  }
  fs::remove_all(root + "/" + name);  // this step's, from before a resume that went back
  rename_into_place(partial, root + "/" + name);
  write_text_atomic(root + "/latest", name + "\n");  // only now is it the checkpoint to resume
  const std::vector<std::string> newest_first = checkpoint_names(dir_);
  for (size_t i = static_cast<size_t>(std::max(keep_, 1)); i < newest_first.size(); ++i) {
    if (newest_first[i] != name) fs::remove_all(root + "/" + newest_first[i]);
  }
  // Every FP8 slot's amax history, as the checkpoint holds it.
  if (tensorboard_ && trainer.precision().precision == Precision::Fp8)
    for (const Fp8SlotState& st : fp8_slot_states(trainer.model()))
      tensorboard_->histogram(trainer.steps_done(), "amax_history/" + st.gemm + "/" + st.slot,
                              st.amax_history);
}

void RunDirectory::stopped(Trainer&) {
  write_report(dir_);
}

void RunDirectory::trained(Trainer& trainer, const TrainResult&) {
  trainer_model_file(trainer, stamp_).write(dir_ + "/model.safetensors");
}

void RunDirectory::finished(Trainer& trainer, const TrainResult& result) {
  write_summary(dir_, trainer, result);
  write_report(dir_);
}

}  // namespace fp8lm
