// A checkpoint's training state (train_state.safetensors beside the model file): AdamW's
// moments, the FP32 masters of FP8 weights, the losses and the run's progress, written before
// the model file and checked, with the model file, before anything is loaded.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <filesystem>
#include <string_view>

#include "fp8lm/error.h"
#include "io/checkpoint.h"
#include "train/adamw.h"

namespace fp8lm {
namespace {

// What a training state's progress must be: each count within the steps taken and consistent
// with the others (a step is either an AdamW update or skipped), a time that is a time.
void check_progress(const std::string& origin, const TrainProgress& p, int64_t adamw_steps,
                    int64_t steps) {
  check_step_in_run(origin, p.step, steps);
  if (p.skipped_steps < 0 || p.skipped_steps > p.step) {
    throw Error(fmt::format("{}: skipped_steps {} is not between 0 and its step {}", origin,
                            p.skipped_steps, p.step));
  }
  if (p.consecutive_skips < 0 || p.consecutive_skips > p.skipped_steps) {
    throw Error(fmt::format("{}: consecutive_skips {} is not between 0 and its skipped_steps {}",
                            origin, p.consecutive_skips, p.skipped_steps));
  }
  if (adamw_steps != p.step - p.skipped_steps) {
    throw Error(fmt::format("{}: adamw_steps {} is not its step {} less its {} skipped steps",
                            origin, adamw_steps, p.step, p.skipped_steps));
  }
  if (!std::isfinite(p.seconds) || p.seconds < 0)
    throw Error(fmt::format("{}: seconds {} is not a time of 0 or more", origin, p.seconds));
  if (static_cast<int64_t>(p.losses.size()) != p.step) {
    throw Error(
        fmt::format("{}: it holds {} losses for its {} steps", origin, p.losses.size(), p.step));
  }
}

}  // namespace

void save_checkpoint(const std::string& dir, GPT& model, const AdamW& opt,
                     const CheckpointInfo& info, const TrainProgress& progress) {
  for (size_t i = 0; i < opt.parameters().size(); ++i) {
    if (!opt.holds_moments(i) ||
        opt.parameters()[i]->value.size() != static_cast<size_t>(opt.parameters()[i]->numel()))
      throw Error("internal: the optimizer state is sharded (ZeRO-1); gather it before saving");
  }
  std::filesystem::create_directories(dir);
  // Each tensor is read where it lives (from a GPU: downloaded a piece at a time) only when the
  // write reaches it.
  SafetensorsWriter state;
  for (size_t i = 0; i < opt.parameters().size(); ++i) {
    const Parameter* p = opt.parameters()[i];
    state.add("adamw.m." + p->name, DType::F32, p->shape,
              [&opt, i](const SafetensorsWriter::Sink& sink) {
                opt.first_moment_buffer(i).read_bytes(sink);
              });
    state.add("adamw.v." + p->name, DType::F32, p->shape,
              [&opt, i](const SafetensorsWriter::Sink& sink) {
                opt.second_moment_buffer(i).read_bytes(sink);
              });
    // The model file holds FP8 weights only as FP8; their FP32 masters live here.
    if (info.config.fp8_weights && p->name.ends_with(".weight") && p->shape.size() == 2) {
      state.add("master." + p->name, DType::F32, p->shape,
                [p](const SafetensorsWriter::Sink& sink) { p->value.read_bytes(sink); });
    }
  }
  state.add_f32("losses", {static_cast<int64_t>(progress.losses.size())}, progress.losses);
  auto& meta = state.metadata();
  meta["step"] = std::to_string(progress.step);
  meta["adamw_steps"] = std::to_string(opt.steps());
  meta["seconds"] = fmt::format("{:.17g}", progress.seconds);
  meta["data_state"] = progress.data_state;
  meta["skipped_steps"] = std::to_string(progress.skipped_steps);
  meta["consecutive_skips"] = std::to_string(progress.consecutive_skips);
  meta["skip_reason"] = progress.skip_reason;
  meta["fp8_saturated_steps"] = fmt::format("{}", fmt::join(progress.saturated_steps, ","));
  if (!info.run_id.empty()) meta["run_id"] = info.run_id;
  // The training state first: a model file is only ever beside a complete state.
  state.write(dir + "/train_state.safetensors");
  model_file(model, info).write(dir + "/model.safetensors");
}

namespace {

// A training state's progress from its metadata, checked against the run's steps (from its
// model file's config) before any large tensor is read.
TrainProgress read_progress(const Safetensors& state, const Safetensors& model_file,
                            int64_t& adamw_steps) {
  const auto& meta = state.metadata();
  for (const char* key : {"step", "adamw_steps", "seconds", "data_state"}) {
    if (!meta.count(key))
      throw Error(fmt::format("{}: no '{}' in its metadata", state.origin(), key));
  }
  TrainProgress p;
  p.step = metadata_number<int64_t>(state, "step");
  p.seconds = metadata_number<double>(state, "seconds");
  p.losses = state.at("losses").to_f32();
  p.data_state = meta.at("data_state");
  if (meta.count("skipped_steps")) {  // checkpoints written before skipping have none
    p.skipped_steps = metadata_number<int64_t>(state, "skipped_steps");
    p.consecutive_skips = metadata_number<int64_t>(state, "consecutive_skips");
    p.skip_reason = meta.at("skip_reason");
  }
  if (meta.count("fp8_saturated_steps") && !meta.at("fp8_saturated_steps").empty()) {
    std::string_view text = meta.at("fp8_saturated_steps");
    while (!text.empty()) {  // comma-separated counts, one per GEMM
      const size_t comma = std::min(text.find(','), text.size());
      int64_t v = 0;
      const auto [end, ec] = std::from_chars(text.data(), text.data() + comma, v);
      if (ec != std::errc() || end != text.data() + comma)
        throw Error(fmt::format("{}: metadata 'fp8_saturated_steps' is damaged", state.origin()));
      p.saturated_steps.push_back(v);
      text.remove_prefix(std::min(comma + 1, text.size()));
    }
  }
  adamw_steps = metadata_number<int64_t>(state, "adamw_steps");
  const auto& model_meta = model_file.metadata();
  if (!model_meta.count("config"))
    throw Error(fmt::format("{}: not an fp8lm checkpoint", model_file.origin()));
  const TrainConfig config = train_config_from_json(model_meta.at("config"), model_file.origin());
  check_progress(state.origin(), p, adamw_steps, config.steps);
  if (model_meta.count("fp8_fallbacks"))
    p.fp8_fallbacks = fp8_fallbacks_from_json(model_meta.at("fp8_fallbacks"), model_file.origin());
  return p;
}

}  // namespace

TrainProgress load_checkpoint(const std::string& dir, GPT& model, AdamW& opt) {
  // Checked tensor by tensor as they are loaded: the trainer loaded into is dropped if one is
  // damaged (resume_trainer builds a fresh one per checkpoint it tries).
  const Safetensors model_file = Safetensors::read(dir + "/model.safetensors", Verify::OnFirstUse);
  const Safetensors state = Safetensors::read(dir + "/train_state.safetensors", Verify::OnFirstUse);
  // Both files name their step: two files from different checkpoints are not one.
  const auto model_step = metadata_number<int64_t>(model_file, "step");
  const auto state_step = metadata_number<int64_t>(state, "step");
  if (model_step != state_step) {
    throw Error(
        fmt::format("{}: model.safetensors is from step {}, train_state.safetensors from "
                    "step {}: not one checkpoint",
                    dir, model_step, state_step));
  }
  const auto run_of = [](const Safetensors& f) {
    const auto it = f.metadata().find("run_id");
    return it == f.metadata().end() ? std::string("none") : it->second;
  };
  if (run_of(model_file) != run_of(state)) {
    throw Error(
        fmt::format("{}: model.safetensors is of run {}, train_state.safetensors of run "
                    "{}: not one checkpoint",
                    dir, run_of(model_file).substr(0, 64), run_of(state).substr(0, 64)));
  }
  warn_unverified(state.origin(), state.metadata());
  int64_t adamw_steps = 0;
  TrainProgress progress = read_progress(state, model_file, adamw_steps);
  apply_model_tensors(model_file, model);
  // Each read once from the file straight into its home, checked on the way, in the file's
  // order.
  struct Load {
    std::string name;
    Parameter* p;
    BackendBuffer<float>* into;
  };
  std::vector<Load> loads;
  for (size_t i = 0; i < opt.parameters().size(); ++i) {
    Parameter* p = opt.parameters()[i];
    if (opt.holds_moments(i)) {  // under ZeRO-1, the rank's share of the parameters only
      loads.push_back({"adamw.m." + p->name, p, &opt.first_moment_buffer(i)});
      loads.push_back({"adamw.v." + p->name, p, &opt.second_moment_buffer(i)});
    }
    if (state.contains("master." + p->name)) loads.push_back({"master." + p->name, p, &p->value});
  }
  std::ranges::sort(loads, {}, [&](const Load& l) { return state.position(l.name); });
  for (const Load& l : loads) {
    // Moments are finite by construction (a step that is not finite is skipped): only the
    // masters' values, the model's own, are checked, and refused when they are not.
    const bool master = l.into == &l.p->value;
    TensorReader in(
        state, l.name,
        master ? TensorReader::Check::ChecksumAndFinite : TensorReader::Check::Checksum);
    if (in.shape() != l.p->shape || in.dtype() != DType::F32) {
      throw Error(fmt::format("{}: tensor '{}' does not match the model", state.origin(), l.name));
    }
    l.into->fill_bytes([&](std::span<uint8_t> piece) { in.read(piece); });
    if (master) ++l.p->version;
    if (!in.finish()) {
      throw Error(
          fmt::format("{}: tensor '{}' holds values that are not finite", state.origin(), l.name));
    }
  }
  opt.set_steps(adamw_steps);
  return progress;
}

}  // namespace fp8lm
