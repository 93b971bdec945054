#pragma once
// Statistics over seeds, for `fp8lm compare`: a value's mean and spread across runs that differ
// only in their seed, and the gap between two arms run on the same seeds with Student's t
// interval (paired: seed s of one arm saw the same initial weights and data order as seed s of
// the other, so the per-seed differences cancel what the seed alone moves).
#include <vector>

namespace fp8lm {

struct SeedSpread {
  int n = 0;          // finite values
  double mean = 0.0;  // NaN when n is 0
  double std = 0.0;   // sample standard deviation (n - 1 in the denominator); NaN when n < 2
};

SeedSpread seed_spread(const std::vector<double>& values);  // non-finite values left out

// The two-sided 95% quantile of Student's t with df degrees of freedom (df >= 1): t such that
// P(|T| <= t) = 0.95.
double student_t95(int df);

struct PairedGap {
  int n = 0;                     // seeds where both values are finite
  double mean = 0.0;             // mean of a[s] - b[s]; NaN when n is 0
  double low = 0.0, high = 0.0;  // its 95% interval; NaN when n < 2
  bool distinguishable = false;  // the interval excludes 0
};

// a[s] - b[s] over the seeds s where both are finite (a and b hold one value per seed, in
// the same seed order).
PairedGap paired_gap(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace fp8lm
