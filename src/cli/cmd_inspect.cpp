// fp8lm inspect RUN_DIR|CHECKPOINT: every GEMM slot's FP8 state, as TE users read fp8_meta.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "cli/commands.h"
#include "cli/parse.h"
#include "core/json.h"
#include "fp8/recipe.h"
#include "fp8lm/error.h"
#include "io/block_scales.h"
#include "io/checkpoint.h"
#include "io/run_dir.h"
#include "nn/precision_map.h"

namespace fp8lm::cli {
namespace {

struct InspectFlags {
  std::string target;
  std::optional<int64_t> layer;  // all when not given
  int64_t last = 4;
  bool json = false;
};

// The exponent histogram as a one-line bar chart, lowest exponent first.
std::string sparkline(const std::map<int, int64_t>& exponents) {
  static const char* kBars[] = {" ", "▁", "▂", "▃", "▄", "▅", "▆", "▇", "█"};
  int64_t most = 1;
  for (const auto& [e, n] : exponents) most = std::max(most, n);
  std::string out;
  if (exponents.empty()) return out;
  for (int e = exponents.begin()->first; e <= exponents.rbegin()->first; ++e) {
    const auto it = exponents.find(e);
    const int64_t n = it == exponents.end() ? 0 : it->second;
    out += kBars[n == 0 ? 0 : 1 + (n * 7) / most];
  }
  return out;
}

// The exponent below which half the blocks lie (0 when there are none).
int median_exponent(const std::map<int, int64_t>& exponents) {
  int64_t total = 0, seen = 0;
  for (const auto& [e, n] : exponents) total += n;
  for (const auto& [e, n] : exponents) {
    seen += n;
    if (2 * seen >= total) return e;
  }
  return 0;
}

// Block-scaled recipes (issue 14): per GEMM and tensor role, what the last recorded casts did.
void print_block_scales(const InspectFlags& f, const Safetensors& file, const TrainConfig& c,
                        const std::string& path, const std::string& step,
                        const nlohmann::json& map_json, const std::vector<std::string>& kept) {
  const auto blocks = parse_json(file.metadata().at("block_scales"), path + ": block_scales");
  if (!blocks.is_object()) throw Error(fmt::format("{}: block_scales is not a JSON object", path));
  const BlockScaleRecord stats = block_scales_from_json(blocks, path);
  if (f.json) {
    fmt::print("{}\n", nlohmann::json{{"file", path},
                                      {"step", step},
                                      {"recipe", recipe_description(c.recipe)},
                                      {"precision_map", map_json},
                                      {"block_scales", blocks}}
                           .dump());
    return;
  }
  fmt::print("{} (step {}) · recipe {}\n", path, step, recipe_description(c.recipe));
  fmt::print(
      "each block's scale as a power of two (its decode multiplier); saturated: blocks with a "
      "value clipped; flushed: blocks whose non-zero values all became 0\n");
  for (const std::string& gemm : gemm_names(c.model.n_layers)) {
    int layer = -1;
    if (std::sscanf(gemm.c_str(), "layers.%d.", &layer) == 1 && f.layer && layer != *f.layer)
      continue;
    if (std::find(kept.begin(), kept.end(), gemm) != kept.end()) {
      fmt::print("{} · bf16 (precision map)\n", gemm);
      continue;
    }
    const auto it = stats.find(gemm);
    if (it == stats.end()) continue;
    fmt::print("{}\n", gemm);
    for (const auto& [role, st] : it->second) {
      const auto& e = st.exponents;
      const int lo = e.empty() ? 0 : e.begin()->first, hi = e.empty() ? 0 : e.rbegin()->first;
      const double n = std::max<double>(1, static_cast<double>(st.blocks));
      fmt::print(
          "  {:<22} {:>7} blocks · 2^{}..2^{} median 2^{} [{}] · saturated {:.2f}% · "
          "flushed {:.2f}% · zero {:.2f}%{}\n",
          role, st.blocks, lo, hi, median_exponent(e), sparkline(e),
          100 * static_cast<double>(st.saturated_blocks) / n,
          100 * static_cast<double>(st.flushed_blocks) / n,
          100 * static_cast<double>(st.zero_blocks) / n,
          c.recipe.kind == ScalingKind::Nvfp4 ? fmt::format(" · tensor scale {:g}", st.tensor_scale)
                                              : "");
    }
  }
}

void run_inspect(const InspectFlags& f) {
  if (f.last < 0) throw Error(fmt::format("--last {} must be 0 or more", f.last));
  const std::string path = model_file_path(f.target);
  const Safetensors file = Safetensors::read(path);
  if (!file.metadata().count("config"))
    throw Error(fmt::format("{}: not an fp8lm model file", path));
  warn_unverified(path, file.metadata());
  const TrainConfig c = train_config_from_json(file.metadata().at("config"), path);
  if (f.layer && (*f.layer < 0 || *f.layer >= c.model.n_layers)) {
    throw Error(
        fmt::format("--layer {}: the model's layers are 0 to {}", *f.layer, c.model.n_layers - 1));
  }
  const std::string step = file.metadata().count("step") ? file.metadata().at("step") : "?";
  const int64_t skipped =
      file.metadata().count("skipped_steps") ? metadata_number<int64_t>(file, "skipped_steps") : 0;
  if (skipped > 0 && !f.json)
    fmt::print("{} steps were skipped (loss or gradients not finite)\n", skipped);
  const std::vector<Fp8Fallback> fallbacks =
      file.metadata().count("fp8_fallbacks")
          ? fp8_fallbacks_from_json(file.metadata().at("fp8_fallbacks"), path)
          : std::vector<Fp8Fallback>{};
  if (!f.json) {
    for (const Fp8Fallback& fb : fallbacks)
      fmt::print("{} fell back to BF16 at step {} ({}: {})\n", fb.gemm, fb.step, fb.slot,
                 fb.reason);
  }
  const std::vector<std::string> kept = precision_map_gemms(c.model.n_layers, c.precision_map);
  const nlohmann::json map_json = {{"map", c.precision_map}, {"bf16_gemms", kept}};
  if (!f.json && !kept.empty()) {
    fmt::print("precision map {}: {} GEMMs in BF16 ({})\n", c.precision_map, kept.size(),
               fmt::join(kept, ", "));
  }
  if (c.recipe.block_scaled() && file.metadata().count("block_scales")) {
    print_block_scales(f, file, c, path, step, map_json, kept);
    return;
  }
  if (!file.contains("layers.0.qkv.fp8.fwd.scale")) {
    const std::string precision =
        file.metadata().count("precision") ? file.metadata().at("precision") : "?";
    if (f.json) {
      fmt::print("{}\n", nlohmann::json{{"file", path},
                                        {"step", step},
                                        {"skipped_steps", skipped},
                                        {"fp8_fallbacks", fp8_fallbacks_json(fallbacks)},
                                        {"precision_map", map_json},
                                        {"precision", precision},
                                        {"fp8", nullptr}}
                             .dump());
    } else {
      fmt::print("{} (step {}): no FP8 state: this model ran in {}\n", path, step, precision);
    }
    return;
  }
  const Format recipe_format = c.recipe.delayed.format;
  const int64_t ranks =
      file.metadata().count("world_size") ? metadata_number<int64_t>(file, "world_size") : 1;
  nlohmann::json out = {{"file", path},
                        {"step", step},
                        {"world_size", ranks},
                        {"skipped_steps", skipped},
                        {"fp8_fallbacks", fp8_fallbacks_json(fallbacks)},
                        {"precision_map", map_json},
                        {"recipe", format_name(recipe_format)},
                        {"gemms", nlohmann::json::array()}};
  if (!f.json) {
    fmt::print("{} (step {}) · recipe {} · amax_history_len {}\n", path, step,
               format_name(recipe_format), c.recipe.delayed.amax_history_len);
    if (ranks > 1) {
      fmt::print(
          "trained on {} data-parallel ranks: the amaxes were max-reduced across them "
          "before every scaling update, so this state is every rank's\n",
          ranks);
    }
  }
  for (int64_t i = 0; i < c.model.n_layers; ++i) {
    if (f.layer && i != *f.layer) continue;
    for (const char* gemm : {"qkv", "proj", "fc1", "fc2"}) {
      const std::string name = fmt::format("layers.{}.{}", i, gemm);
      if (!f.json) {
        const bool bf16 = std::find(kept.begin(), kept.end(), name) != kept.end();
        fmt::print("{}{}\n", name, bf16 ? " · bf16 (precision map)" : "");
      }
      for (Direction d : {Direction::Forward, Direction::Backward}) {
        const std::string p = name + (d == Direction::Forward ? ".fp8.fwd." : ".fp8.bwd.");
        const auto scale = file.at(p + "scale").to_f32(),
                   scale_inv = file.at(p + "scale_inv").to_f32();
        const auto sat = file.at(p + "saturated_fraction").to_f32(),
                   flush = file.at(p + "flushed_fraction").to_f32();
        const TensorData& ht = file.at(p + "amax_history");
        const auto hist = ht.to_f32();
        const int64_t len = ht.shape.at(0), n = ht.shape.at(1);
        const Slot slots[2][3] = {{Slot::Input, Slot::Weight, Slot::Output},
                                  {Slot::GradOutput, Slot::GradInput, Slot::GradInput}};
        for (int64_t s = 0; s < n; ++s) {
          std::vector<float> h;
          for (int64_t k = 0; k < len; ++k) h.push_back(hist[static_cast<size_t>(k * n + s)]);
          // Entry 0 accumulates the step in progress (0 right after an update): past steps only.
          const auto [lo, hi] = std::minmax_element(h.begin() + (len > 1 ? 1 : 0), h.end());
          const std::vector<float> tail(h.end() - std::min<int64_t>(f.last, len), h.end());
          const Slot slot = slots[d == Direction::Forward ? 0 : 1][s];
          const auto fmt8 = dtype_short_name(tensor_format(recipe_format, d));
          const auto k = static_cast<size_t>(s);
          if (f.json) {
            out["gemms"].push_back({{"gemm", name},
                                    {"slot", slot_name(slot)},
                                    {"format", fmt8},
                                    {"scale", scale[k]},
                                    {"scale_inv", scale_inv[k]},
                                    {"amax_history_len", len},
                                    {"amax_history_last", tail},
                                    {"amax_min", *lo},
                                    {"amax_max", *hi},
                                    {"saturated_fraction", sat[k]},
                                    {"flushed_fraction", flush[k]}});
          } else {
            fmt::print(
                "  {:<11} {} scale {:<12.6g} scale_inv {:<12.6g} amax last [{}] min {:.4g} max "
                "{:.4g} · "
                "saturated {:.3g}% · flushed {:.3g}%\n",
                slot_name(slot), fmt8, scale[k], scale_inv[k], fmt::join(tail, " "), *lo, *hi,
                100 * sat[k], 100 * flush[k]);
          }
        }
      }
    }
  }
  if (f.json) fmt::print("{}\n", out.dump());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect",
                                 "Show every GEMM slot's FP8 scaling state of a run or model file");
  auto f = std::make_shared<InspectFlags>();
  cmd->add_option("target", f->target, "a model file or a run directory")
      ->type_name("MODEL")
      ->required();
  cmd->add_option("--layer", f->layer, "only this layer (default: all)");
  cmd->add_option("--last", f->last, "amax history entries shown (default 4)");
  cmd->add_flag("--json", f->json, "print JSON");
  on_call(cmd, f, run_inspect);
}

}  // namespace fp8lm::cli
