// fp8lm advise: will FP8 pay off for this model? Per GEMM shape and for the whole step, the
// FP8/BF16 speedup on H100, H200 and B200 from a roofline model (train/roofline.h, every
// assumption printed), and, where a GPU is present, each GEMM measured on it instead.
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/setting_options.h"
#include "core/input_file.h"
#include "core/json.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "kernels/device.h"
#include "train/compare_plan.h"
#include "train/gemm_timing.h"
#include "train/roofline.h"
#include "train/settings.h"

namespace fp8lm::cli {
namespace {

struct AdviseFlags {
  std::string config, recipes = "delayed", gpus, device = "auto";
  bool json = false;
  std::shared_ptr<SettingOptions> settings = std::make_shared<SettingOptions>();  // the model's
};

// The model's shape and the batch: what sizes the GEMMs.
bool advise_setting(const Setting& s) {
  return s.group == "model" || s.name == "batch-size";
}

// "h100" for "H100 SXM".
std::string gpu_key(const std::string& name) {
  std::string key = name.substr(0, name.find(' '));
  for (char& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return key;
}

std::string ratio_text(double r) {
  return fmt::format("{:.2f}x {}", r, r >= 1.05 ? "gains" : r <= 0.95 ? "loses" : "even");
}

int run_advise(const AdviseFlags& f, CLI::App* cmd) {
  TrainConfig c;
  if (!f.config.empty()) {
    const nlohmann::json j =
        parse_json(read_input_file(f.config, "--config", kJsonFileBytes), "--config " + f.config);
    apply_settings_json(c, j, f.config, {"run"});
  }
  for (const auto& [s, text] : given_settings(*f.settings, cmd)) apply_setting(c, *s, text);
  check_each_setting(c);  // each value in its range (--batch-size 0 too)
  c.model.validate();
  std::vector<ScalingKind> recipes;
  for (const std::string& r : split_list(f.recipes, "--recipe"))
    recipes.push_back(parse_scaling_kind(r));
  std::vector<GpuPeaks> gpus;
  if (f.gpus.empty()) {
    gpus = datasheet_gpus();
  } else {
    for (const std::string& name : split_list(f.gpus, "--gpu")) {
      const auto& all = datasheet_gpus();
      const auto it =
          std::ranges::find_if(all, [&](const GpuPeaks& g) { return gpu_key(g.name) == name; });
      if (it == all.end()) throw Error(fmt::format("--gpu {}: not one of h100, h200, b200", name));
      gpus.push_back(*it);
    }
  }
  // Where a GPU is present (and not --device cpu), each GEMM is timed on it.
  const DeviceChoice device = resolve_device(parse_device(f.device));
  const std::vector<GemmShape> gemms = fp8_gemms(c);
  std::vector<MeasuredGemm> measured;
  if (device.cuda) {
    Backend& be = backend_for(device);
    for (const GemmShape& g : gemms) measured.push_back(time_gemm(be, g));
  }

  const GPTConfig& m = c.model;
  nlohmann::json out = {{"model",
                         {{"d_model", m.d_model},
                          {"n_layers", m.n_layers},
                          {"ffn", m.ffn},
                          {"seq_len", m.seq_len},
                          {"batch_size", c.batch_size},
                          {"parameters", m.parameter_count()}}},
                        {"assumptions", roofline_assumptions()}};
  if (!f.json) {
    fmt::print(
        "model: {} parameters · d_model {} · {} layers · {} heads ({} key/value) · ffn {} "
        "({}) · seq {} · batch {}\n",
        m.parameter_count(), m.d_model, m.n_layers, m.n_heads, m.kv_heads(), m.ffn,
        activation_name(m.activation), m.seq_len, c.batch_size);
  }
  for (const ScalingKind recipe : recipes) {
    nlohmann::json r = {{"recipe", scaling_kind_name(recipe)}};
    if (!f.json) {
      fmt::print("\nrecipe {}: FP8 over BF16 time, roofline estimate (casts included)\n",
                 scaling_kind_name(recipe));
      fmt::print("{:<12} {:>22}", "GEMM", "M x N x K");
      for (const GpuPeaks& g : gpus) fmt::print(" {:>16}", g.name);
      if (device.cuda) fmt::print("  {:>16}", "measured here");
      fmt::print("\n");
    }
    for (size_t i = 0; i < gemms.size(); ++i) {
      const GemmShape& g = gemms[i];
      nlohmann::json row = {{"gemm", g.name}, {"M", g.M}, {"N", g.N}, {"K", g.K}};
      if (!f.json) fmt::print("{:<12} {:>22}", g.name, fmt::format("{} x {} x {}", g.M, g.N, g.K));
      for (const GpuPeaks& gpu : gpus) {
        const GemmEstimate e = estimate_gemm(g, gpu, recipe);
        const double ratio = e.bf16_s / (e.fp8_s + e.cast_s);
        row["estimate"][gpu.name] = {{"bf16_s", e.bf16_s},
                                     {"fp8_s", e.fp8_s},
                                     {"cast_s", e.cast_s},
                                     {"speedup", ratio},
                                     {"native", e.native}};
        if (!f.json) fmt::print(" {:>16}", ratio_text(ratio));
      }
      if (device.cuda) {
        const MeasuredGemm& mg = measured[i];
        row["measured"] = {{"device", device.name},
                           {"bf16_s", mg.bf16_s},
                           {"fp8_s", mg.fp8_s},
                           {"speedup", mg.bf16_s / mg.fp8_s}};
        if (!f.json) fmt::print("  {:>16}", ratio_text(mg.bf16_s / mg.fp8_s));
      }
      if (!f.json) fmt::print("\n");
      r["gemms"].push_back(row);
    }
    if (!f.json) fmt::print("{:<35}", "whole step");
    for (const GpuPeaks& gpu : gpus) {
      const StepEstimate s = estimate_step(c, gpu, recipe);
      r["step"][gpu.name] = {{"bf16_s", s.bf16_s()},
                             {"fp8_s", s.fp8_s()},
                             {"speedup", s.speedup()},
                             {"gemm_share_of_bf16", s.gemm_bf16_s / s.bf16_s()}};
      if (!f.json) fmt::print(" {:>16}", fmt::format("{:.2f}x", s.speedup()));
    }
    // The step again with the GEMMs measured here, the casts and the rest as the roofline has
    // them for this GPU (where it is one of the datasheets').
    const auto here = std::ranges::find_if(datasheet_gpus(), [&](const GpuPeaks& g) {
      return device.name.find(g.name.substr(0, g.name.find(' '))) != std::string::npos;
    });
    if (device.cuda && here != datasheet_gpus().end()) {
      const StepEstimate s = estimate_step(c, *here, recipe);
      double bf16 = s.other_s, fp8 = s.other_s + s.cast_s;
      for (size_t i = 0; i < gemms.size(); ++i) {
        bf16 += static_cast<double>(gemms[i].per_step) * measured[i].bf16_s;
        fp8 += static_cast<double>(gemms[i].per_step) * measured[i].fp8_s;
      }
      r["step_measured_gemms"] = {{"device", device.name}, {"speedup", bf16 / fp8}};
      if (!f.json) fmt::print("  {:>16}", fmt::format("{:.2f}x", bf16 / fp8));
    }
    if (!f.json) {
      fmt::print("\n{:<35}", "  GEMMs' share of the BF16 step");
      for (const GpuPeaks& gpu : gpus)
        fmt::print(
            " {:>16}",
            fmt::format("{:.0f}%", 100 * r["step"][gpu.name]["gemm_share_of_bf16"].get<double>()));
      fmt::print("\n");
    }
    out["recipes"].push_back(r);
  }
  if (f.json) {
    fmt::print("{}\n", out.dump(2));
    return 0;
  }
  if (device.cuda) {
    fmt::print(
        "\nmeasured here: each GEMM on {} (median of 10 calls after 3; BF16 against "
        "per-tensor E4M3 operands, random values; casts not included); the whole step "
        "in that column adds the roofline's casts and rest of the step to them\n",
        device.name);
  }
  fmt::print("\nassumptions (docs/guide/will-fp8-pay-off.md derives the model):\n");
  for (const std::string& a : roofline_assumptions()) fmt::print("- {}\n", a);
  return 0;
}

}  // namespace

void add_advise_command(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "advise", "Will FP8 pay off? Each GEMM's and the step's FP8/BF16 speedup on H100/H200/B200");
  auto f = std::make_shared<AdviseFlags>();
  cmd->option_defaults()->group("Advice");
  cmd->add_option("--config", f->config, "JSON file of settings, e.g. a run's config.json")
      ->type_name("FILE");
  cmd->add_option("--recipe", f->recipes,
                  "FP8 recipes, comma-separated: delayed, current, block, mxfp8, nvfp4")
      ->type_name("LIST");
  cmd->add_option("--gpu", f->gpus, "GPUs to estimate for, comma-separated (default: all)")
      ->type_name("{h100,h200,b200}");
  cmd->add_option("--device", f->device,
                  "auto: measure each GEMM on a GPU when one is present; cpu: estimates only")
      ->type_name("{auto,cpu,cuda,cuda:N}");
  cmd->add_flag("--json", f->json, "print the estimates as JSON");
  add_setting_options(cmd, f->settings, advise_setting,
                      [](const Setting&) { return "Model (as train takes it)"; });
  cmd->callback([f, cmd] {
    if (parse_only()) return;
    const int code = run_advise(*f, cmd);
    if (code != 0) throw CLI::RuntimeError(code);
  });
}

}  // namespace fp8lm::cli
