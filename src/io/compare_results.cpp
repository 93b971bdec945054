#include "io/compare_results.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string_view>

#include "core/input_file.h"
#include "core/json.h"
#include "core/seed_statistics.h"
#include "fp8lm/error.h"
#include "train/trainer.h"

namespace fp8lm {
namespace {

using Json = nlohmann::json;

// TE's three GEMM roles; "input_columnwise" (a block recipe's second cast of the same tensor)
// counts as "input". Empty for the slots no GEMM casts (output, grad_input).
std::string role_of(const std::string& slot) {
  const std::string role = slot.substr(0, slot.find("_columnwise"));
  return role == "input" || role == "weight" || role == "grad_output" ? role : "";
}

double number_or_nan(const Json& j, std::string_view key) {
  const auto it = j.find(key);
  return it != j.end() && it->is_number() ? it->get<double>() : NAN;
}

void read_summary(const std::string& path, RunOutcome& r) {
  const Json j = read_json_file(path, kJsonFileBytes);
  r.finished = true;
  r.ok = json_value<bool>(j, "ok", false, path);
  r.failure = json_value<std::string>(j, "failure", "", path);
  r.stride_accuracy = number_or_nan(j, "stride_accuracy");
  r.tokens_per_s = number_or_nan(j, "tokens_per_s");
  r.peak_rss_mb = number_or_nan(j, "peak_rss_mb");
  r.steps = json_value<int64_t>(j, "steps", 0, path);
  r.skipped_steps = json_value<int64_t>(j, "skipped_steps", 0, path);
  const auto fallbacks = j.find("fp8_fallbacks");
  if (fallbacks != j.end() && fallbacks->is_array())
    r.fp8_fallbacks = static_cast<int64_t>(fallbacks->size());
}

// Sums of one role's saturation over a run's records: values (a mean of fractions) or blocks.
struct Saturation {
  double sum = 0.0, count = 0.0;
};

void add_fp8_record(const Json& fp8, std::map<std::string, Saturation>& roles) {
  for (const auto& [gemm, slots] : fp8.items()) {
    if (!slots.is_object()) continue;
    for (const auto& [slot, st] : slots.items()) {
      const std::string role = role_of(slot);
      if (role.empty() || !st.is_object() || !st.contains("saturated") ||
          !st["saturated"].is_number())
        continue;
      Saturation& s = roles[role];
      s.sum += st["saturated"].get<double>();
      s.count += 1.0;
    }
  }
}

void add_block_record(const Json& blocks, std::map<std::string, Saturation>& roles) {
  for (const auto& [gemm, slots] : blocks.items()) {
    if (!slots.is_object()) continue;
    for (const auto& [slot, st] : slots.items()) {
      const std::string role = role_of(slot);
      if (role.empty() || !st.is_object()) continue;
      const double saturated = number_or_nan(st, "saturated"), n = number_or_nan(st, "blocks");
      if (!std::isfinite(saturated) || !std::isfinite(n)) continue;
      Saturation& s = roles[role];
      s.sum += saturated;
      s.count += n;
    }
  }
}

void read_metrics(const std::string& path, RunOutcome& r) {
  InputStream in(path, "");
  std::map<std::string, Saturation> roles;
  std::vector<double> tail_losses;  // every step's loss, NaN for a skipped step
  int64_t n = 0;
  for (std::string line; std::getline(in, line);) {
    const std::string where = fmt::format("{} line {}", path, ++n);
    const Json j = parse_json(line, where);
    const double step = static_cast<double>(json_require<int64_t>(j, "step", where));
    const double loss = number_or_nan(j, "loss");
    tail_losses.push_back(loss);
    if (std::isfinite(loss)) {
      r.loss_steps.push_back(step);
      r.losses.push_back(loss);
    }
    if (const double v = number_or_nan(j, "val_loss"); std::isfinite(v)) {
      r.val_steps.push_back(step);
      r.val_losses.push_back(v);
    }
    if (j.contains("fp8") && j["fp8"].is_object()) {
      add_fp8_record(j["fp8"], roles);
      r.saturated_of = "values";
    }
    if (j.contains("block_scales") && j["block_scales"].is_object()) {
      add_block_record(j["block_scales"], roles);
      r.saturated_of = "blocks";
    }
  }
  const size_t first = tail_losses.size() - std::min<size_t>(kFinalLossSteps, tail_losses.size());
  const std::vector<double> tail(tail_losses.begin() + static_cast<std::ptrdiff_t>(first),
                                 tail_losses.end());
  r.train_loss = seed_spread(tail).mean;
  if (!r.val_losses.empty()) r.val_loss = r.val_losses.back();
  for (const auto& [role, s] : roles) r.saturated[role] = s.count > 0 ? s.sum / s.count : NAN;
}

// NaN as null: JSON has no NaN.
Json number(double v) {
  return std::isfinite(v) ? Json(v) : Json(nullptr);
}

Json spread_json(const std::vector<double>& values) {
  const SeedSpread s = seed_spread(values);
  return {{"n", s.n}, {"mean", number(s.mean)}, {"std", number(s.std)}};
}

// "+0.651%", "-0.00213%": a signed percentage to 3 significant digits (gaps between recipes
// can be far below a hundredth of a percent).
std::string percent(double v) {
  return fmt::format("{:+.3g}%", 100.0 * v);
}

// The gap of one value to the baseline's, in its units and relative to the baseline's mean.
Json gap_json(const std::vector<double>& arm, const std::vector<double>& base) {
  const PairedGap g = paired_gap(arm, base);
  const double ref = seed_spread(base).mean;
  return {{"n", g.n},
          {"mean", number(g.mean)},
          {"low", number(g.low)},
          {"high", number(g.high)},
          {"relative", number(g.mean / ref)},
          {"relative_low", number(g.low / ref)},
          {"relative_high", number(g.high / ref)},
          {"distinguishable", g.distinguishable}};
}

// One sentence on the headline gap: is it beyond what the seed alone moves?
std::string verdict(const std::string& label, const std::string& baseline,
                    const std::string& metric, const Json& gap, const SeedSpread& base) {
  const int n = gap["n"].get<int>();
  if (n == 0) return fmt::format("{}: no {} to compare with {}'s", label, metric, baseline);
  const double rel = gap["relative"].is_number() ? gap["relative"].get<double>() : NAN;
  if (n < 2) {
    return fmt::format(
        "{}: {} {} vs {} from one seed; one seed cannot tell a gap from seed noise (--seeds 3 or "
        "more)",
        label, metric, percent(rel), baseline);
  }
  const std::string interval =
      fmt::format("95% interval {} to {} over {} seeds", percent(gap["relative_low"].get<double>()),
                  percent(gap["relative_high"].get<double>()), n);
  if (gap["distinguishable"].get<bool>()) {
    return fmt::format("{}: {} {} than {}'s by {:.3g}% ({}): beyond seed noise", label, metric,
                       rel > 0 ? "higher" : "lower", baseline, 100.0 * std::fabs(rel), interval);
  }
  return fmt::format(
      "{}: {} {} vs {} ({}, which holds 0): within seed noise ({}'s own spread across seeds is "
      "{:.3g}%)",
      label, metric, percent(rel), baseline, interval, baseline, 100.0 * base.std / base.mean);
}

// "3.9078 ± 0.0367": a {n, mean, std} of compare.json.
std::string spread_text(const Json& s, int digits) {
  if (!s.is_object() || !s["mean"].is_number()) return "n/a";
  const double mean = s["mean"].get<double>();
  if (!s["std"].is_number()) return fmt::format("{:.{}f}", mean, digits);
  return fmt::format("{:.{}f} ± {:.{}f}", mean, digits, s["std"].get<double>(), digits);
}

// "+0.538% [-12%, +13.1%]".
std::string gap_text(const Json& arm, const std::string& key) {
  if (!arm.contains(key)) return "baseline";
  const Json& g = arm[key];
  if (!g["relative"].is_number()) return "n/a";
  std::string out = percent(g["relative"].get<double>());
  if (g["relative_low"].is_number())
    out += fmt::format(" [{}, {}]", percent(g["relative_low"].get<double>()),
                       percent(g["relative_high"].get<double>()));
  return out;
}

// "0.013% / 0% / 0.018%" for input / weight / grad_output.
std::string saturation_text(const Json& arm) {
  if (arm["saturated"].empty()) return "no FP8";
  std::string out;
  for (const char* role : {"input", "weight", "grad_output"}) {
    const Json& s = arm["saturated"].contains(role) ? arm["saturated"][role] : Json();
    out += (out.empty() ? "" : " / ") + (s.is_object() && s["mean"].is_number()
                                             ? fmt::format("{:.2g}%", 100 * s["mean"].get<double>())
                                             : std::string("-"));
  }
  return out + (arm["saturated_of"] == "blocks" ? " of blocks" : "");
}

}  // namespace

std::vector<std::vector<std::string>> comparison_table(const Json& summary) {
  const bool val = summary["headline"] == "val_loss";
  const std::string gap_key = val ? "gap_val_loss" : "gap_train_loss";
  std::vector<std::vector<std::string>> rows = {
      {"arm", "train loss", val ? "validation loss" : "stride accuracy",
       fmt::format("{} gap to {} [95%]", val ? "validation" : "train",
                   summary["baseline"].get<std::string>()),
       "tokens/s", "peak MiB", "skipped steps", "BF16 fallbacks",
       "saturated: input / weight / grad_output"}};
  for (const Json& arm : summary["arms"]) {
    const Json& m = summary["measured"][arm["label"].get<std::string>()];
    rows.push_back({arm["label"].get<std::string>(), spread_text(arm["train_loss"], 4),
                    spread_text(val ? arm["val_loss"] : arm["stride_accuracy"], 4),
                    gap_text(arm, gap_key), spread_text(m["tokens_per_s"], 0),
                    spread_text(m["peak_rss_mb"], 0),
                    std::to_string(arm["skipped_steps"].get<int64_t>()),
                    std::to_string(arm["fp8_fallbacks"].get<int64_t>()), saturation_text(arm)});
  }
  return rows;
}

std::string shared_machine_note(const Json& summary) {
  // value(): a const JSON object's [] may not be given a key it lacks.
  const int64_t n = summary["measured"].value("runs_at_once", int64_t{1});
  if (n <= 1) return "";
  return fmt::format(
      "tokens/s: up to {} runs trained at once (--jobs) and shared the machine; compare speeds "
      "with --jobs 1",
      n);
}

RunOutcome read_run_outcome(const std::string& dir) {
  RunOutcome r;
  if (std::filesystem::exists(dir + "/metrics.jsonl")) read_metrics(dir + "/metrics.jsonl", r);
  if (std::filesystem::exists(dir + "/summary.json")) read_summary(dir + "/summary.json", r);
  return r;
}

Json comparison_json(const Comparison& c) {
  const auto column = [&](size_t arm, double RunOutcome::*field) {
    std::vector<double> v;
    for (const RunOutcome& r : c.runs[arm]) v.push_back(r.*field);
    return v;
  };
  size_t base = 0;
  while (c.arms[base].label != c.baseline) ++base;
  // The headline: validation loss where every run has one (text), else the train loss.
  bool every_val = true;
  for (const auto& runs : c.runs)
    for (const RunOutcome& r : runs) every_val = every_val && std::isfinite(r.val_loss);
  const auto headline = every_val ? &RunOutcome::val_loss : &RunOutcome::train_loss;
  const std::string headline_name = every_val ? "validation loss" : "train loss";

  Json arms = Json::array(), measured = Json::object();
  for (size_t a = 0; a < c.arms.size(); ++a) {
    const CompareArm& arm = c.arms[a];
    Json runs = Json::array();
    int64_t skipped = 0, fallbacks = 0;
    std::map<std::string, std::vector<double>> saturated;
    std::string saturated_of;
    for (size_t s = 0; s < c.seeds.size(); ++s) {
      const RunOutcome& r = c.runs[a][s];
      Json sat = Json::object();
      for (const auto& [role, v] : r.saturated) {
        sat[role] = number(v);
        saturated[role].push_back(v);
      }
      if (!r.saturated_of.empty()) saturated_of = r.saturated_of;
      runs.push_back({{"seed", c.seeds[s]},
                      {"dir", c.dirs[a][s]},
                      {"finished", r.finished},
                      {"ok", r.ok},
                      {"failure", r.failure},
                      {"steps", r.steps},
                      {"train_loss", number(r.train_loss)},
                      {"val_loss", number(r.val_loss)},
                      {"stride_accuracy", number(r.stride_accuracy)},
                      {"skipped_steps", r.skipped_steps},
                      {"fp8_fallbacks", r.fp8_fallbacks},
                      {"saturated", sat}});
      skipped += r.skipped_steps;
      fallbacks += r.fp8_fallbacks;
    }
    Json j = {{"label", arm.label},
              {"precision", arm.precision},
              {"recipe", arm.recipe.empty() ? Json(nullptr) : Json(arm.recipe)},
              {"fp8_format", arm.format.empty() ? Json(nullptr) : Json(arm.format)},
              {"runs", runs},
              {"train_loss", spread_json(column(a, &RunOutcome::train_loss))},
              {"val_loss", spread_json(column(a, &RunOutcome::val_loss))},
              {"stride_accuracy", spread_json(column(a, &RunOutcome::stride_accuracy))},
              {"skipped_steps", skipped},
              {"fp8_fallbacks", fallbacks}};
    Json sat = Json::object();
    for (const auto& [role, v] : saturated) sat[role] = spread_json(v);
    j["saturated"] = sat;
    j["saturated_of"] = saturated_of.empty() ? Json(nullptr) : Json(saturated_of);
    if (a != base) {
      j["gap_train_loss"] =
          gap_json(column(a, &RunOutcome::train_loss), column(base, &RunOutcome::train_loss));
      j["gap_val_loss"] =
          gap_json(column(a, &RunOutcome::val_loss), column(base, &RunOutcome::val_loss));
      j["verdict"] = verdict(arm.label, c.baseline, headline_name,
                             every_val ? j["gap_val_loss"] : j["gap_train_loss"],
                             seed_spread(column(base, headline)));
    } else {
      j["verdict"] = fmt::format("{}: the baseline", arm.label);
    }
    arms.push_back(std::move(j));
    measured[arm.label] = {{"tokens_per_s", spread_json(column(a, &RunOutcome::tokens_per_s))},
                           {"peak_rss_mb", spread_json(column(a, &RunOutcome::peak_rss_mb))}};
  }
  measured["runs_at_once"] = c.runs_at_once;  // no arm's label: those have no '_'
  std::vector<int64_t> seeds(c.seeds.begin(), c.seeds.end());
  return {{"baseline", c.baseline},
          {"seeds", seeds},
          {"headline", every_val ? "val_loss" : "train_loss"},
          {"final_train_loss", fmt::format("the mean loss of the last {} steps", kFinalLossSteps)},
          {"interval", "paired over seeds: Student's t, 95%, two-sided"},
          {"arms", arms},
          {"measured", measured}};
}

}  // namespace fp8lm
