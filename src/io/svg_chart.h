#pragma once
// Inline SVG line charts for the HTML pages (report.html, compare.html): no scripts, no network.
// The legend sits below the plot, never over the lines; a log axis ticks at powers of ten.
#include <string>
#include <vector>

namespace fp8lm {

struct Series {
  std::string name;
  std::vector<double> x, y;
};

// Text for HTML: & < > " as entities.
std::string html_escape(const std::string& s);

// One chart over step, `width` pixels wide (it shrinks with the page: small multiples take
// 300); log_y plots positive values on a log axis (others dropped). A chart without a single
// finite value says so in a sentence instead of drawing empty axes.
std::string line_chart(const std::string& title, std::vector<Series> series, bool log_y = false,
                       double width = 460);

}  // namespace fp8lm
