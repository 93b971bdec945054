#include "io/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <iterator>
#include <sstream>

namespace fp8lm {
namespace {

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b",
                         "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"};

// Where a linear axis from lo to hi ticks: at multiples of a round step (1, 2 or 5 times a
// power of ten) that gives 3 to 6 ticks, so labels read 0.5, 1, 1.5 rather than 0.4716.
// Counted by index rather than by adding steps: where the range is narrower than lo's own
// resolution (values read from a damaged metrics file), lo + step == lo and a loop adding
// steps never ends. A range no step fits gets its two ends.
std::vector<double> linear_ticks(double lo, double hi) {
  const double raw = (hi - lo) / 4, power = std::pow(10.0, std::floor(std::log10(raw)));
  const double step = raw / power < 1.5 ? power : raw / power < 3.5 ? 2 * power : 5 * power;
  const double first = std::ceil(lo / step), last = std::floor(hi / step + 1e-9);
  if (!std::isfinite(lo) || !std::isfinite(hi)) return {};
  if (!(step > 0) || !std::isfinite(first) || !std::isfinite(last) || !(last - first < 16))
    return {lo, hi};
  std::vector<double> t;
  for (int i = 0; i <= static_cast<int>(last - first); ++i) {
    const double v = (first + i) * step;
    if (!t.empty() && v == t.back()) continue;  // steps below v's resolution
    t.push_back(std::fabs(v) < step * 1e-9 ? 0.0 : v);
  }
  return t;
}

// Where a log axis over [lo, hi] (log10 units) ticks: at every power of ten inside it, and at
// 2 and 5 times them where it spans less than two decades; where that gives fewer than three
// ticks (a range inside one decade), at round values as a linear axis would have them.
std::vector<double> log_ticks(double lo, double hi) {
  std::vector<double> t;
  const bool fine = hi - lo < 2.0;
  for (double e = std::floor(lo); e <= std::ceil(hi); e += 1.0) {
    for (const double m : {1.0, 2.0, 5.0}) {
      if (m != 1.0 && !fine) continue;
      const double v = e + std::log10(m);
      if (v >= lo - 1e-9 && v <= hi + 1e-9) t.push_back(v);
    }
  }
  if (t.size() >= 3) return t;
  t.clear();
  for (const double v : linear_ticks(std::pow(10.0, lo), std::pow(10.0, hi)))
    if (v > 0) t.push_back(std::log10(v));
  return t;
}

// 10^v as a reader writes it: 0.001, 0.02, 1, 50, 1e+05.
std::string power_label(double v) {
  return fmt::format("{:g}", std::pow(10.0, v));
}

}  // namespace

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    const char* entity = c == '<'   ? "&lt;"
                         : c == '>' ? "&gt;"
                         : c == '&' ? "&amp;"
                         : c == '"' ? "&quot;"
                                    : nullptr;
    entity ? out.append(entity) : out.append(1, c);
  }
  return out;
}

std::string line_chart(const std::string& title, std::vector<Series> series, bool log_y,
                       double width) {
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  for (Series& s : series) {
    Series kept{s.name, {}, {}};
    for (size_t i = 0; i < s.x.size(); ++i) {
      double y = s.y[i];
      if (!std::isfinite(y) || (log_y && y <= 0)) continue;
      if (log_y) y = std::log10(y);
      kept.x.push_back(s.x[i]);
      kept.y.push_back(y);
      x0 = std::min(x0, s.x[i]), x1 = std::max(x1, s.x[i]), y0 = std::min(y0, y),
      y1 = std::max(y1, y);
    }
    s = std::move(kept);
  }
  if (!(x0 <= x1)) {
    return fmt::format(R"(<p class="empty" data-title="{0}"><b>{0}</b>: no values to plot</p>)",
                       html_escape(title));
  }
  // The legend below the plot, one row per two series: never over the lines.
  const size_t named = series.size() > 1 ? series.size() : 0;
  const double legend_rows = static_cast<double>((named + 1) / 2);
  constexpr double L = 56, R = 12, T = 28, B = 34, Row = 14;
  const double W = width, PlotH = std::round(width * 0.39);
  const double H = T + PlotH + B + (named > 0 ? 6 : 0) + legend_rows * Row;
  std::ostringstream svg;
  svg << fmt::format(
      R"(<svg class="chart" data-title="{}" width="{}" height="{}" viewBox="0 0 {} {}">)",
      html_escape(title), W, H, W, H);
  svg << fmt::format(R"(<rect x="0" y="0" width="{}" height="{}" fill="#fff" stroke="#ccc"/>)", W,
                     H);
  svg << fmt::format(R"(<text x="{}" y="18" font-size="13" font-weight="bold">{}</text>)", L,
                     html_escape(title));
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) {
    const double pad = log_y ? 0.5 : std::max(std::fabs(y0) * 0.1, 1e-3);
    y1 = y0 + pad, y0 -= pad;
  }
  const double bottom = T + PlotH;
  const auto px = [&](double x) { return L + (x - x0) / (x1 - x0) * (W - L - R); };
  const auto py = [&](double y) { return T + (1 - (y - y0) / (y1 - y0)) * PlotH; };
  svg << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#444"/>)", L, bottom, W - R,
                     bottom);
  svg << fmt::format(R"(<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="#444"/>)", L, T, L, bottom);
  for (const double yv : log_y ? log_ticks(y0, y1) : linear_ticks(y0, y1)) {
    const std::string label = log_y ? power_label(yv) : fmt::format("{:g}", yv);
    svg << fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10" text-anchor="end">{}</text>)",
                       L - 4, py(yv) + 3, label);
    svg << fmt::format(R"(<line x1="{}" y1="{:.1f}" x2="{}" y2="{:.1f}" stroke="#eee"/>)", L + 1,
                       py(yv), W - R, py(yv));
  }
  for (const double xv : linear_ticks(x0, x1)) {
    svg << fmt::format(R"(<text x="{:.1f}" y="{}" font-size="10" text-anchor="middle">{:g}</text>)",
                       px(xv), bottom + 14, xv);
  }
  svg << fmt::format(R"(<text x="{}" y="{}" font-size="10" text-anchor="middle">step</text>)",
                     (L + W - R) / 2, bottom + 27);
  for (size_t i = 0; i < series.size(); ++i) {
    const Series& s = series[i];
    const char* color = kColors[i % std::size(kColors)];
    if (named > 0) {  // its legend entry, even for a series with nothing to draw
      const double lx = i % 2 == 0 ? L : L + (W - L - R) / 2,
                   ly = bottom + B + 6 + Row * static_cast<double>(i / 2);
      svg << fmt::format(R"(<rect x="{}" y="{:.1f}" width="10" height="3" fill="{}"/>)", lx, ly - 4,
                         color);
      svg << fmt::format(R"(<text x="{}" y="{:.1f}" font-size="10">{}{}</text>)", lx + 14, ly,
                         html_escape(s.name), s.x.empty() ? " (no values)" : "");
    }
    if (s.x.empty()) continue;
    std::ostringstream pts;
    for (size_t k = 0; k < s.x.size(); ++k)
      pts << fmt::format("{:.1f},{:.1f} ", px(s.x[k]), py(s.y[k]));
    if (s.x.size() == 1) {
      svg << fmt::format(R"(<circle cx="{:.1f}" cy="{:.1f}" r="3" fill="{}"/>)", px(s.x[0]),
                         py(s.y[0]), color);
    }
    svg << fmt::format(
        R"(<polyline fill="none" stroke="{}" stroke-width="1.5" points="{}"><title>{}</title></polyline>)",
        color, pts.str(), html_escape(s.name));
  }
  svg << "</svg>";
  return svg.str();
}

}  // namespace fp8lm
