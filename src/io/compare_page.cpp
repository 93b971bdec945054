// compare.html: what `fp8lm compare` prints, as a page (the table, the verdicts) with each
// arm's loss curves averaged over its seeds. Inline SVG and CSS only: no script, no network.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <sstream>

#include "io/compare_results.h"
#include "io/svg_chart.h"

namespace fp8lm {
namespace {

using Json = nlohmann::json;

// The mean over seeds at each step some seed recorded (a seed without that step left out).
Series mean_curve(const std::string& name, const std::vector<RunOutcome>& runs,
                  std::vector<double> RunOutcome::*steps, std::vector<double> RunOutcome::*values) {
  std::map<double, std::pair<double, int>> at;
  for (const RunOutcome& r : runs) {
    for (size_t i = 0; i < (r.*steps).size(); ++i) {
      auto& [sum, n] = at[(r.*steps)[i]];
      sum += (r.*values)[i];
      ++n;
    }
  }
  Series s{name, {}, {}};
  for (const auto& [step, sum_n] : at) {
    s.x.push_back(step);
    s.y.push_back(sum_n.first / sum_n.second);
  }
  return s;
}

}  // namespace

std::string comparison_page(const Comparison& c, const Json& summary) {
  const bool val = summary["headline"] == "val_loss";
  const std::string gap_key = val ? "gap_val_loss" : "gap_train_loss";
  std::ostringstream html;
  html << "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
          "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
          "<title>fp8lm compare</title><style>"
          "body{font-family:sans-serif;margin:16px;color:#222;max-width:1400px}"
          "h1{font-size:20px}h2{font-size:16px;margin-top:24px}"
          ".wide{overflow-x:auto}table{border-collapse:collapse;font-size:13px}"
          "th,td{padding:4px 8px;border-bottom:1px solid #ddd;text-align:right;white-space:nowrap}"
          "th:first-child,td:first-child{text-align:left}th{background:#f3f3f3;white-space:normal;"
          "vertical-align:bottom}"
          ".row{display:flex;flex-wrap:wrap;gap:12px}svg.chart{max-width:100%;height:auto}"
          "li{margin:4px 0}"
          "</style></head><body>";
  html << fmt::format("<h1>fp8lm compare: {} arms × {} seeds, baseline {}</h1>", c.arms.size(),
                      c.seeds.size(), html_escape(c.baseline));
  const std::vector<std::vector<std::string>> table = comparison_table(summary);
  html << "<div class=\"wide\"><table>";
  for (size_t r = 0; r < table.size(); ++r) {
    html << "<tr>";
    for (const std::string& v : table[r])
      html << (r == 0 ? "<th>" : "<td>") << html_escape(v) << (r == 0 ? "</th>" : "</td>");
    html << "</tr>";
  }
  html << "</table></div>";
  if (const std::string note = shared_machine_note(summary); !note.empty())
    html << "<p>" << html_escape(note) << "</p>";
  html << "<h2>Is each gap more than seed noise?</h2><ul>";
  for (const Json& arm : summary["arms"])
    html << "<li>" << html_escape(arm["verdict"].get<std::string>()) << "</li>";
  html << "</ul><p>A run's train loss is "
       << html_escape(summary["final_train_loss"].get<std::string>())
       << "; gaps are paired over seeds (seed s of every arm starts from the same weights and "
          "reads the same batches), with Student's t 95% interval.</p>";
  if (summary.contains("roofline") && summary["roofline"].is_object() &&
      !summary["roofline"].empty()) {
    html << "<h2>Will FP8 pay off on a GPU?</h2><p>The step's FP8/BF16 speedup for this model on "
            "each GPU, a roofline estimate from the datasheets' peaks (<code>fp8lm advise</code> "
            "shows it GEMM by GEMM, with its assumptions).</p><div class=\"wide\"><table><tr>"
            "<th>arm</th>";
    const Json& first = summary["roofline"].begin().value();
    for (const auto& [gpu, v] : first.items()) html << "<th>" << html_escape(gpu) << "</th>";
    html << "</tr>";
    for (const Json& arm : summary["arms"]) {  // in the arms' order
      const std::string label = arm["label"].get<std::string>();
      if (!summary["roofline"].contains(label)) continue;
      const Json& gpus = summary["roofline"][label];
      html << "<tr><td>" << html_escape(label) << "</td>";
      for (const auto& [gpu, v] : gpus.items())
        html << fmt::format("<td>{:.2f}x</td>", v.get<double>());
      html << "</tr>";
    }
    html << "</table></div>";
  }
  std::vector<Series> train, valid;
  for (size_t a = 0; a < c.arms.size(); ++a) {
    train.push_back(
        mean_curve(c.arms[a].label, c.runs[a], &RunOutcome::loss_steps, &RunOutcome::losses));
    valid.push_back(
        mean_curve(c.arms[a].label, c.runs[a], &RunOutcome::val_steps, &RunOutcome::val_losses));
  }
  html << "<h2>Loss, mean over seeds</h2><div class=\"row\">"
       << line_chart("train loss", train, true) << line_chart("validation loss", valid, true)
       << "</div>";
  html << "<h2>Runs</h2><p>Each run is an ordinary run directory (report.html, metrics.jsonl, "
          "tb/) under runs/; <code>tensorboard --logdir runs</code> overlays them.</p><ul>";
  for (size_t a = 0; a < c.arms.size(); ++a) {
    for (size_t s = 0; s < c.seeds.size(); ++s) {
      const std::string& d = c.dirs[a][s];
      html << fmt::format("<li><a href=\"{0}/report.html\">{0}</a>{1}</li>", html_escape(d),
                          c.runs[a][s].finished ? "" : " (not finished)");
    }
  }
  html << "</ul></body></html>\n";
  return html.str();
}

}  // namespace fp8lm
