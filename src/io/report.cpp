#include "io/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <vector>

#include "core/input_file.h"
#include "core/json.h"
#include "core/parse_number.h"
#include "fp8lm/error.h"
#include "io/atomic_file.h"
#include "io/safetensors.h"
#include "io/svg_chart.h"

namespace fp8lm {

namespace {

using Json = nlohmann::json;
namespace fs = std::filesystem;

// Block-scaled recipes: one cell per recorded step (columns) and GEMM tensor role (rows), its
// colour the median power of two of the blocks' scales (blue small, yellow large), a red
// outline where blocks saturated or flushed; each cell's title holds its numbers.
struct BlockCell {
  double step = 0;
  int median = 0;
  double saturated = 0, flushed = 0;  // fractions of blocks
};

std::string block_heatmap(const std::map<std::string, std::vector<BlockCell>>& rows) {
  std::vector<double> steps;
  int lo = 0, hi = 0;
  bool first = true;
  for (const auto& [name, cells] : rows)
    for (const BlockCell& c : cells) {
      steps.push_back(c.step);
      lo = first ? c.median : std::min(lo, c.median),
      hi = first ? c.median : std::max(hi, c.median);
      first = false;
    }
  std::sort(steps.begin(), steps.end());
  steps.erase(std::unique(steps.begin(), steps.end()), steps.end());
  constexpr double L = 210, T = 24, cw = 14, ch = 11;
  const double W = L + cw * static_cast<double>(steps.size()) + 150,
               H = T + ch * static_cast<double>(rows.size()) + 30;
  std::ostringstream svg;
  svg << fmt::format(
      R"(<svg class="heatmap" data-title="block scales" width="{}" height="{}" viewBox="0 0 {} {}">)",
      W, H, W, H);
  const auto colour = [&](int e) {
    const double t = hi == lo ? 0.5 : static_cast<double>(e - lo) / (hi - lo);
    // viridis-like: dark blue -> teal -> yellow
    const int r = static_cast<int>(68 + t * (253 - 68)), g = static_cast<int>(1 + t * (231 - 1)),
              b = static_cast<int>(84 + t * (37 - 84));
    return fmt::format("#{:02x}{:02x}{:02x}", r, g, b);
  };
  double y = T;
  for (const auto& [name, cells] : rows) {
    svg << fmt::format(R"(<text x="{}" y="{}" font-size="9" text-anchor="end">{}</text>)", L - 4,
                       y + ch - 2, html_escape(name));
    for (const BlockCell& c : cells) {
      const auto col = std::lower_bound(steps.begin(), steps.end(), c.step) - steps.begin();
      const bool bad = c.saturated > 0 || c.flushed > 0;
      svg << fmt::format(
          R"(<rect x="{}" y="{}" width="{}" height="{}" fill="{}" stroke="{}"><title>{} step {}: median 2^{} · saturated {:.2f}% · flushed {:.2f}% of blocks</title></rect>)",
          L + cw * static_cast<double>(col), y, cw - 1, ch - 1, colour(c.median),
          bad ? "#d62728" : "none", html_escape(name), c.step, c.median, 100 * c.saturated,
          100 * c.flushed);
    }
    y += ch;
  }
  for (size_t k = 0; k < steps.size(); k += std::max<size_t>(1, steps.size() / 8)) {
    svg << fmt::format(R"(<text x="{}" y="{}" font-size="9" text-anchor="middle">{:.0f}</text>)",
                       L + cw * static_cast<double>(k) + cw / 2, y + 12, steps[k]);
  }
  const double lx = L + cw * static_cast<double>(steps.size()) + 20;
  svg << fmt::format(R"(<text x="{}" y="{}" font-size="10">median scale</text>)", lx, T - 6);
  for (int k = 0; k <= 4; ++k) {
    const int e = lo + (hi - lo) * k / 4;
    svg << fmt::format(R"(<rect x="{}" y="{}" width="12" height="10" fill="{}"/>)", lx,
                       T + 14.0 * k, colour(e));
    svg << fmt::format(R"(<text x="{}" y="{}" font-size="10">2^{}</text>)", lx + 16,
                       T + 14.0 * k + 9, e);
  }
  svg << "</svg>";
  return svg.str();
}

// The FP8 sections: each GEMM role, what it is, and the quantities charted per layer.
const std::pair<const char*, const char*> kRoles[] = {
    {"input", "The tensor each GEMM multiplies in the forward pass (X in Y = X Wᵀ)."},
    {"weight", "Each GEMM's weight W, cast once per step."},
    {"grad_output", "The output gradient dY the backward GEMMs read (dX = dY W, dW = dYᵀ X)."}};
const std::pair<const char*, const char*> kQuantities[] = {
    {"amax", "amax (newest)"}, {"scale", "scale"}, {"saturated", "saturated (%)"}};
constexpr int kOpenLayers = 4;  // shown; the layers after them fold

bool all_zero(const std::map<int, std::map<std::string, Series>>& layers) {
  for (const auto& [layer, gemms] : layers)
    for (const auto& [gemm, s] : gemms)
      for (const double y : s.y)
        if (y != 0) return false;
  return true;
}

// 12345678 -> "12,345,678".
std::string grouped(double v) {
  std::string digits = fmt::format("{:.0f}", std::fabs(v)), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return (v < 0 ? "-" : "") + out;
}

// summary.json as a table with units; its text as it is when it does not read.
std::string summary_table(const std::string& text) {
  if (text.empty())
    return "<p>No summary.json yet: the run has not ended (stopped, or training).</p>";
  Json j;
  try {
    j = parse_json(text, "summary.json");
  } catch (const Error&) {
    return "<h2>Summary</h2><pre>" + html_escape(text) + "</pre>";
  }
  if (!j.is_object()) return "<h2>Summary</h2><pre>" + html_escape(text) + "</pre>";
  std::vector<std::pair<std::string, std::string>> rows;
  const auto num = [&](const char* key) -> const Json* {
    return j.contains(key) && j[key].is_number() ? &j[key] : nullptr;
  };
  const auto text_of = [&](const char* key) {
    return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : std::string();
  };
  if (j.contains("ok"))
    rows.push_back(
        {"result", j["ok"] == true ? "ended well" : "did not end well: " + text_of("failure")});
  rows.push_back(
      {"precision",
       text_of("precision") +
           (text_of("precision_reason").empty() ? "" : " (" + text_of("precision_reason") + ")")});
  if (!text_of("recipe").empty() && text_of("recipe") != "none")
    rows.push_back({"recipe", text_of("recipe")});
  if (const Json* v = num("steps")) rows.push_back({"steps", grouped(v->get<double>())});
  if (const Json* v = num("seconds"))
    rows.push_back({"training time", fmt::format("{:.3g} s", v->get<double>())});
  if (const Json* v = num("tokens_per_s"))
    rows.push_back({"throughput", grouped(v->get<double>()) + " tokens/s"});
  if (const Json* v = num("final_loss"))
    rows.push_back(
        {"final train loss (mean of the last 50 steps)", fmt::format("{:.4f}", v->get<double>())});
  if (const Json* v = num("val_loss"))
    rows.push_back({"validation loss", fmt::format("{:.4f}", v->get<double>())});
  if (const Json* v = num("stride_accuracy"))
    rows.push_back({"stride accuracy", fmt::format("{:.1f}%", 100 * v->get<double>())});
  if (const Json* v = num("skipped_steps"))
    rows.push_back({"skipped steps", grouped(v->get<double>())});
  if (j.contains("fp8_fallbacks") && j["fp8_fallbacks"].is_array())
    rows.push_back({"GEMMs fallen back to BF16", std::to_string(j["fp8_fallbacks"].size())});
  if (const Json* v = num("parameters")) rows.push_back({"parameters", grouped(v->get<double>())});
  if (const Json* v = num("world_size")) rows.push_back({"processes", grouped(v->get<double>())});
  if (const Json* v = num("peak_rss_mb"))
    rows.push_back({"peak memory (resident)", fmt::format("{:.0f} MiB", v->get<double>())});
  std::string html = "<h2>Summary</h2><table>";
  for (const auto& [k, v] : rows)
    html += "<tr><th>" + html_escape(k) + "</th><td>" + html_escape(v) + "</td></tr>";
  return html + "</table>";
}

}  // namespace

void write_report(const std::string& dir) {
  const std::string metrics = dir + "/metrics.jsonl";
  if (!fs::exists(metrics)) throw Error(fmt::format("{}: no metrics.jsonl to report on", dir));
  InputStream in(metrics, "");
  Series loss{"train", {}, {}}, val{"validation", {}, {}}, tps{"tokens/s", {}, {}},
      lr{"lr", {}, {}}, gn{"grad norm", {}, {}}, comm{"ms per step", {}, {}};
  // role (input | weight | grad_output) -> quantity (amax | scale | saturated) -> layer -> the
  // series of each of its GEMMs (qkv, proj, fc1, fc2)
  std::map<std::string, std::map<std::string, std::map<int, std::map<std::string, Series>>>> fp8;
  std::vector<int64_t> skipped;
  struct Fallback {
    double step;
    std::string gemm, slot, reason;
  };
  std::vector<Fallback> fallbacks;
  std::map<std::string, std::vector<BlockCell>> blocks;  // "gemm role" -> cells by step
  // A line that does not read is left out of the charts and named on the page: the report is
  // written at the end of a run, which it must not fail.
  int64_t line_no = 0, unread = 0;
  std::string first_unread;
  for (std::string line; std::getline(in, line);) {
    const std::string where = fmt::format("{} line {}", metrics, ++line_no);
    try {
      const Json j = parse_json(line, where);
      if (!j.is_object() || !j.contains("step")) continue;
      // A step is a count: anything else (2.5e23, 1.5) leaves the line out.
      const int64_t step_no = json_require<int64_t>(j, "step", where);
      const auto step = static_cast<double>(step_no);
      if (j.contains("skipped")) skipped.push_back(step_no);
      if (j.contains("fp8_fallback") && j["fp8_fallback"].is_array()) {
        for (const Json& f : j["fp8_fallback"]) {
          const std::string at = where + ": fp8_fallback";
          fallbacks.push_back({step, json_value<std::string>(f, "gemm", "?", at),
                               json_value<std::string>(f, "slot", "?", at),
                               json_value<std::string>(f, "reason", "?", at)});
        }
      }
      const auto add = [&](Series& s, const char* key) {
        if (j.contains(key) && j[key].is_number())
          s.x.push_back(step), s.y.push_back(j[key].get<double>());
      };
      add(loss, "loss"), add(val, "val_loss"), add(tps, "tokens_per_s"), add(lr, "lr"),
          add(gn, "grad_norm"), add(comm, "comm_seconds");
      if (j.contains("block_scales") && j["block_scales"].is_object()) {
        for (const auto& [gemm, roles] : j["block_scales"].items()) {
          if (!roles.is_object())
            throw Error(fmt::format("{}: block_scales {}: not an object", where, gemm));
          for (const auto& [role, st] : roles.items()) {
            const std::string at = fmt::format("{}: block_scales {} {}", where, gemm, role);
            BlockCell cell{step};
            int64_t total = 0, seen = 0;
            std::map<int, int64_t> hist;
            const Json exponents = st.is_object() ? st.value("exponents", Json::object()) : Json();
            if (!exponents.is_object()) throw Error(fmt::format("{}: no exponents object", at));
            for (const auto& [e, n] : exponents.items()) {
              // A scale's power of two: within a double's exponents.
              const std::optional<int64_t> exp = parse_int(e);
              if (!exp || *exp < -1100 || *exp > 1100)
                throw Error(fmt::format("{}: exponent '{}' is not one from -1100 to 1100", at, e));
              const auto count = json_as<uint32_t>(n, fmt::format("{}: exponent {}", at, e));
              hist[static_cast<int>(*exp)] += count, total += count;
            }
            for (const auto& [e, n] : hist) {
              seen += n;
              if (2 * seen >= total) {
                cell.median = e;
                break;
              }
            }
            const double n = std::max(1.0, json_value<double>(st, "blocks", 1.0, at));
            cell.saturated = json_value<double>(st, "saturated", 0.0, at) / n;
            cell.flushed = json_value<double>(st, "flushed", 0.0, at) / n;
            blocks[gemm + " " + role].push_back(cell);
          }
        }
      }
      if (!j.contains("fp8") || !j["fp8"].is_object()) continue;
      for (const auto& [gemm, slots] : j["fp8"].items()) {
        int layer = 0;
        char name[16] = {};
        if (std::sscanf(gemm.c_str(), "layers.%d.%15s", &layer, name) != 2) continue;
        for (const char* slot : {"input", "weight", "grad_output"}) {
          if (!slots.contains(slot)) continue;
          const Json& s = slots[slot];
          for (const char* q : {"amax", "scale", "saturated"}) {
            if (!s.contains(q) || !s[q].is_number()) continue;
            Series& series = fp8[slot][q][layer][name];
            series.name = name;
            series.x.push_back(step);
            series.y.push_back(s[q].get<double>() * (std::string(q) == "saturated" ? 100.0 : 1.0));
          }
        }
      }
    } catch (const Error& e) {
      if (unread++ == 0) first_unread = e.what();
    }
  }
  std::string summary, config = "{}";
  if (fs::exists(dir + "/summary.json"))
    summary = read_input_file(dir + "/summary.json", "", kJsonFileBytes);
  if (fs::exists(dir + "/config.json"))
    config = read_input_file(dir + "/config.json", "", kJsonFileBytes);

  std::ostringstream html;
  html << "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
          "<title>fp8lm run report</title><style>"
          "body{font-family:sans-serif;margin:16px;color:#222;max-width:1400px}"
          "h1{font-size:20px;overflow-wrap:anywhere}h2{font-size:16px;margin-top:24px}"
          "h3{font-size:14px;margin:14px 0 6px}"
          ".row{display:flex;flex-wrap:wrap;gap:12px}svg{max-width:100%;height:auto}"
          ".wide{overflow-x:auto}table{border-collapse:collapse;font-size:13px}"
          "th,td{padding:3px 10px;border-bottom:1px solid #ddd;text-align:left}"
          "td.n{text-align:right;font-variant-numeric:tabular-nums}"
          "summary{cursor:pointer;margin:8px 0}pre{background:#f6f6f6;padding:8px;font-size:"
          "11px;max-height:260px;overflow:auto}"
          "</style></head><body>";
  html << "<h1>fp8lm run report: " << html_escape(dir) << "</h1>";
  html << summary_table(summary);
  html << "<h2>Training</h2>";
  if (!skipped.empty()) {
    html << "<p><b>" << skipped.size()
         << " steps skipped</b> (loss or gradients not finite; no update made): "
         << fmt::format("{}", fmt::join(skipped, ", ")) << "</p>";
  }
  for (const Fallback& f : fallbacks) {
    html << "<p><b>" << html_escape(f.gemm) << " fell back to BF16</b> at step " << f.step
         << " (slot " << html_escape(f.slot) << ": " << html_escape(f.reason) << ")</p>";
  }
  if (unread > 0) {
    html << "<p><b>" << unread
         << " lines of metrics.jsonl left out</b>, the first: " << html_escape(first_unread)
         << "</p>";
  }
  html << "<div class=\"row\">";
  html << line_chart("loss (train and validation)", {loss, val});
  html << line_chart("throughput (tokens/s)", {tps});
  html << line_chart("learning rate", {lr});
  if (!comm.y.empty()) {  // data parallel: the time each step spent in collectives
    for (double& s : comm.y) s *= 1000;
    html << line_chart("communication (ms per step, rank 0)", {comm});
  }
  html << line_chart("gradient norm", {gn});
  html << "</div>";
  for (const auto& [role, what] : kRoles) {
    if (!fp8.contains(role)) continue;
    html << "<h2>FP8 scaling: " << role << "</h2><p>" << what
         << " Each chart is one layer, a line per GEMM.</p>";
    for (const auto& [key, title] : kQuantities) {
      auto& layers = fp8[role][key];
      if (std::string(key) == "saturated" && all_zero(layers)) {
        html << "<p class=\"empty\" data-title=\"" << role << " saturated\"><b>" << title
             << "</b>: no value saturated, in any layer or GEMM.</p>";
        continue;
      }
      html << "<h3>" << title << "</h3>";
      std::string open, folded;
      int shown = 0, first_folded = -1, last = 0;
      for (auto& [layer, gemms] : layers) {
        std::vector<Series> lines;
        for (auto& [gemm, series] : gemms) lines.push_back(series);
        const std::string chart = line_chart(fmt::format("{} · layer {} · {}", role, layer, title),
                                             lines, std::string(key) != "saturated", 300);
        if (shown++ < kOpenLayers) {
          open += chart;
        } else {
          if (first_folded < 0) first_folded = layer;
          folded += chart;
        }
        last = layer;
      }
      html << "<div class=\"row\">" << open << "</div>";
      if (!folded.empty()) {
        html << fmt::format("<details><summary>layers {} to {}</summary><div class=\"row\">",
                            first_folded, last)
             << folded << "</div></details>";
      }
    }
  }
  if (!blocks.empty()) {
    html << "<h2>Block scales</h2><h3>The median power of two of each tensor's block scales, "
            "by GEMM, role and step</h3><p>A red outline marks a step where blocks saturated or "
            "flushed; each cell's tooltip has its numbers.</p><div class=\"wide\">"
         << block_heatmap(blocks) << "</div>";
  } else if (fp8.empty()) {
    html << "<p>No FP8 state: this run did not train in FP8.</p>";
  }
  html << "<details><summary>config.json</summary><pre>" << html_escape(config)
       << "</pre></details>";
  html << "</body></html>\n";
  write_text_atomic(dir + "/report.html", html.str());
}

}  // namespace fp8lm
