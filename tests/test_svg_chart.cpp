// The report's charts (io/svg_chart.h) on the values a damaged metrics file can hold: a range
// narrower than its values' own resolution (fuzz_metrics found a chart whose tick loop never
// ended there and ate memory), infinite and huge ranges. Each gives a chart with a handful of
// axis ticks; an ordinary range keeps its round ticks.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "io/svg_chart.h"

namespace fp8lm {
namespace {

// Gridlines are drawn one per y tick.
size_t y_ticks(const std::string& svg) {
  size_t n = 0;
  for (size_t at = svg.find("stroke=\"#eee\""); at != std::string::npos;
       at = svg.find("stroke=\"#eee\"", at + 1))
    ++n;
  return n;
}

std::string chart_of(std::vector<double> y, bool log_y = false) {
  std::vector<double> x;
  for (size_t i = 0; i < y.size(); ++i) x.push_back(static_cast<double>(i + 1));
  return line_chart("scale", {{"scale", x, std::move(y)}}, log_y);
}

TEST(SvgChart, ARangeBelowItsValuesResolutionGetsFewTicks) {
  const double v = 18867096.0;  // a scale from fuzz_metrics' case, and the next double
  const std::string svg = chart_of({v, std::nextafter(v, INFINITY)});
  EXPECT_GE(y_ticks(svg), 1u);
  EXPECT_LE(y_ticks(svg), 16u);
  const std::string huge = chart_of({1e300, std::nextafter(1e300, INFINITY)});
  EXPECT_LE(y_ticks(huge), 16u);
  const std::string wide = chart_of({-1.7e308, 1.7e308});  // (hi - lo) overflows
  EXPECT_LE(y_ticks(wide), 16u);
}

TEST(SvgChart, AnOrdinaryRangeTicksAtRoundValues) {
  const std::string svg = chart_of({0.1, 0.8, 1.9});
  for (const char* label : {">0.5<", ">1<", ">1.5<"})
    EXPECT_NE(svg.find(label), std::string::npos) << label;
  EXPECT_EQ(y_ticks(svg), 3u);  // a step of 0.5 over [0.1, 1.9]
}

}  // namespace
}  // namespace fp8lm
