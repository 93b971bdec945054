#include "io/run_dir.h"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "io/report.h"
#include "nn/fp8_slots.h"

namespace fp8lm {

namespace fs = std::filesystem;
using Json = nlohmann::json;

namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void write_text_atomic(const std::string& path, const std::string& text) {
  write_file_atomic(path, std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

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

// Keeps metrics lines of steps up to `step` (a resumed run rewrites what came after).
void truncate_metrics(const std::string& path, int64_t step) {
  if (!fs::exists(path)) return;
  std::ifstream in(path);
  std::string kept, line;
  while (std::getline(in, line)) {
    const Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_object() && j.contains("step") && j["step"].is_number() &&
        j["step"].get<int64_t>() <= step) {
      kept += line + "\n";
    }
  }
  write_text_atomic(path, kept);
}

CheckpointInfo checkpoint_info(const Trainer& trainer) {
  return {trainer.config(), trainer.precision().label(),
          trainer.precision().precision == Precision::Fp8, trainer.steps_done(),
          trainer.skipped_steps()};
}

}  // namespace

std::string latest_checkpoint(const std::string& run_dir) {
  const std::string latest = run_dir + "/checkpoints/latest";
  std::string name = read_text(latest);
  while (!name.empty() && (name.back() == '\n' || name.back() == ' ')) name.pop_back();
  if (name.empty() || !fs::is_directory(run_dir + "/checkpoints/" + name)) {
    throw Error(fmt::format("{}: no checkpoint to resume from", run_dir));
  }
  return run_dir + "/checkpoints/" + name;
}

void write_summary(const std::string& dir, const Trainer& trainer, const TrainResult& r) {
  const TrainConfig& c = trainer.config();
  const DelayedScaling& d = c.recipe.delayed;
  Json j = {
      {"precision", r.precision.label()},
      {"precision_reason", r.precision.reason},
      {"recipe", r.precision.precision == Precision::Fp8
                     ? fmt::format("{} {} margin={} amax_history_len={} amax_compute_algo={}{}",
                                   c.recipe.kind == ScalingKind::Delayed ? "delayed" : "current",
                                   format_name(d.format), d.margin, d.amax_history_len,
                                   amax_compute_algo_name(d.amax_compute_algo),
                                   c.fp8_weights ? " fp8_weights" : "")
                     : "none"},
      {"steps", r.steps},
      {"seconds", r.seconds},
      {"tokens_per_s", r.tokens_per_s},
      {"final_loss", r.final_loss},
      {"skipped_steps", r.skipped_steps},
      {"parameters", c.model.parameter_count()}};
  if (r.stride_task) {
    j["stride_accuracy"] = r.stride_accuracy;
  } else {
    j["val_loss"] = r.val_loss;
  }
  write_text_atomic(dir + "/summary.json", j.dump(2) + "\n");
}

Safetensors trainer_model_file(Trainer& trainer) {
  return model_file(trainer.model(), checkpoint_info(trainer));
}

void save_trainer(Trainer& trainer, const std::string& checkpoint_dir) {
  GPT& model = trainer.model();
  save_checkpoint(checkpoint_dir, model, trainer.optimizer(), checkpoint_info(trainer),
                  trainer.progress());
}

std::unique_ptr<Trainer> resume_trainer(const std::string& checkpoint_dir) {
  auto trainer = std::make_unique<Trainer>(checkpoint_config(checkpoint_dir));
  GPT& model = trainer->model();
  trainer->restore_progress(load_checkpoint(checkpoint_dir, model, trainer->optimizer()));
  trainer->refresh_fp8_weights();
  return trainer;
}

RunDirectory::RunDirectory(std::string dir, Trainer& trainer, int keep_checkpoints)
    : dir_(std::move(dir)), keep_(keep_checkpoints) {
  fs::create_directories(dir_);
  write_text_atomic(dir_ + "/config.json", train_config_to_json(trainer.config()) + "\n");
  const std::string metrics_path = dir_ + "/metrics.jsonl";
  truncate_metrics(metrics_path, trainer.steps_done());
  metrics_.open(metrics_path, std::ios::app);
}

void RunDirectory::step(Trainer& trainer, const StepRecord& record) {
  const StepStats& s = record.stats;
  Json line = {{"step", s.step},
               {"loss", s.loss},
               {"lr", s.lr},
               {"grad_norm", s.grad_norm},
               {"tokens_per_s", s.step_tokens_per_s},
               {"seconds", s.seconds}};
  if (s.skipped) line["skipped"] = true;  // its loss (NaN or Inf) is written as null
  if (s.skipped_steps > 0) line["skipped_steps"] = s.skipped_steps;
  if (record.val_loss) line["val_loss"] = *record.val_loss;
  if (record.fp8_snapshot) line["fp8"] = fp8_snapshot(trainer.model());
  metrics_ << line.dump() << "\n" << std::flush;
}

void RunDirectory::checkpoint(Trainer& trainer) {
  const std::string root = dir_ + "/checkpoints";
  const std::string name = fmt::format("step-{:06d}", trainer.steps_done());
  save_trainer(trainer, root + "/" + name);
  write_text_atomic(root + "/latest", name + "\n");  // only now is it the checkpoint to resume
  std::vector<std::string> all;
  for (const auto& e : fs::directory_iterator(root))
    if (e.is_directory() && e.path().filename().string().starts_with("step-"))
      all.push_back(e.path().filename());
  std::sort(all.begin(), all.end());
  for (size_t i = 0; i + static_cast<size_t>(std::max(keep_, 1)) < all.size(); ++i) {
    if (all[i] != name) fs::remove_all(root + "/" + all[i]);
  }
}

void RunDirectory::stopped(Trainer&) {
  metrics_.close();
  write_report(dir_);
}

void RunDirectory::finished(Trainer& trainer, const TrainResult& result) {
  trainer_model_file(trainer).write(dir_ + "/model.safetensors");
  write_summary(dir_, trainer, result);
  metrics_.close();
  write_report(dir_);
}

}  // namespace fp8lm
