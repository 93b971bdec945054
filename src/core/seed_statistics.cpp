#include "core/seed_statistics.h"

#include <cmath>
#include <cstddef>

namespace fp8lm {

SeedSpread seed_spread(const std::vector<double>& values) {
  SeedSpread s;
  double sum = 0.0;
  for (const double v : values) {
    if (!std::isfinite(v)) continue;
    sum += v;
    ++s.n;
  }
  s.mean = s.n > 0 ? sum / s.n : NAN;
  if (s.n < 2) {
    s.std = NAN;
    return s;
  }
  double squares = 0.0;  // about the mean: no cancellation between two large sums
  for (const double v : values)
    if (std::isfinite(v)) squares += (v - s.mean) * (v - s.mean);
  s.std = std::sqrt(squares / (s.n - 1));
  return s;
}

double student_t95(int df) {
  // The 0.975 quantiles for 1..30 degrees of freedom (standard tables, to 4 decimals).
  static constexpr double kTable[] = {
      12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.3060, 2.2622, 2.2281,
      2.2010,  2.1788, 2.1604, 2.1448, 2.1314, 2.1199, 2.1098, 2.1009, 2.0930, 2.0860,
      2.0796,  2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484, 2.0452, 2.0423};
  if (df < 1) return NAN;
  if (df <= 30) return kTable[df - 1];
  // Beyond the table, the Cornish-Fisher expansion about the normal quantile z: its next term is
  // below 1e-5 from df 30 on, under the table's last digit.
  const double z = 1.959963984540054, z3 = z * z * z, z5 = z3 * z * z, n = df;
  return z + (z3 + z) / (4 * n) + (5 * z5 + 16 * z3 + 3 * z) / (96 * n * n);
}

PairedGap paired_gap(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> d;
  for (size_t s = 0; s < a.size() && s < b.size(); ++s)
    if (std::isfinite(a[s]) && std::isfinite(b[s])) d.push_back(a[s] - b[s]);
  const SeedSpread spread = seed_spread(d);
  PairedGap g;
  g.n = spread.n;
  g.mean = spread.mean;
  if (g.n < 2) {
    g.low = g.high = NAN;
    return g;
  }
  const double half = student_t95(g.n - 1) * spread.std / std::sqrt(static_cast<double>(g.n));
  g.low = g.mean - half;
  g.high = g.mean + half;
  g.distinguishable = g.low > 0 || g.high < 0;
  return g;
}

}  // namespace fp8lm
