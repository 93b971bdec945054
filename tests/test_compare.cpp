// fp8lm compare's pieces (issue 32): the seed statistics against their definitions (Student's
// t quantile by integrating its density), and which arms a comparison's lists make, with the
// nonsense ones refused by name. The whole command against its runs' metrics.jsonl and across a
// stop and --resume: tools/compare_check.py.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>
#include <vector>

#include "core/seed_statistics.h"
#include "fp8lm/error.h"
#include "train/compare_plan.h"

namespace fp8lm {
namespace {

// P(|T| <= t) for Student's t with df degrees of freedom, by Simpson's rule on its density
// (the density is smooth: 20000 panels put the error far below the 1e-4 asked of it).
double t_coverage(double t, int df) {
  const double n = df;
  const double c =
      std::exp(std::lgamma((n + 1) / 2) - std::lgamma(n / 2)) / std::sqrt(n * std::numbers::pi);
  const auto density = [&](double x) { return c * std::pow(1 + x * x / n, -(n + 1) / 2); };
  const int panels = 20000;
  const double h = t / panels;
  double sum = density(0) + density(t);
  for (int i = 1; i < panels; ++i) sum += density(i * h) * (i % 2 ? 4 : 2);
  return 2 * sum * h / 3;
}

TEST(SeedStatistics, StudentsQuantileCoversNinetyFivePercent) {
  for (const int df : {1, 2, 3, 5, 10, 29, 30, 31, 45, 100, 1000})
    EXPECT_NEAR(t_coverage(student_t95(df), df), 0.95, 1e-4) << "df " << df;
}

TEST(SeedStatistics, SpreadIsTheSampleMeanAndDeviation) {
  const SeedSpread s = seed_spread({1.0, 2.0, 4.0, NAN});
  EXPECT_EQ(s.n, 3);
  EXPECT_DOUBLE_EQ(s.mean, 7.0 / 3);
  // Deviations -4/3, -1/3, 5/3: squares 16/9 + 1/9 + 25/9 = 42/9, over n - 1 = 2.
  EXPECT_DOUBLE_EQ(s.std, std::sqrt(42.0 / 18));
  EXPECT_TRUE(std::isnan(seed_spread({3.0}).std));
  EXPECT_TRUE(std::isnan(seed_spread({}).mean));
}

TEST(SeedStatistics, PairedGapUsesPerSeedDifferences) {
  // Seeds move both arms alike (1, 5, 9): paired, the gap of 0.1 is far beyond the noise,
  // though each arm's own spread (4) is forty times the gap.
  const PairedGap g = paired_gap({1.1, 5.1, 9.1}, {1.0, 5.0, 9.0});
  EXPECT_EQ(g.n, 3);
  EXPECT_NEAR(g.mean, 0.1, 1e-12);
  EXPECT_NEAR(g.low, 0.1, 1e-9);
  EXPECT_TRUE(g.distinguishable);
  // Differences 0.2, -0.1, 0.05: mean 0.05, sd 0.15; half width t(2) 0.15 / sqrt 3.
  const PairedGap h = paired_gap({1.2, 4.9, 9.05}, {1.0, 5.0, 9.0});
  EXPECT_NEAR(h.mean, 0.05, 1e-12);
  EXPECT_NEAR(h.high - h.mean, 4.302653 * 0.15 / std::sqrt(3.0), 1e-4);
  EXPECT_FALSE(h.distinguishable);
  const PairedGap one = paired_gap({2.0}, {1.0});
  EXPECT_EQ(one.n, 1);
  EXPECT_TRUE(std::isnan(one.low));
  EXPECT_FALSE(one.distinguishable);
}

std::vector<std::string> labels(const std::vector<CompareArm>& arms) {
  std::vector<std::string> out;
  for (const CompareArm& a : arms) out.push_back(a.label);
  return out;
}

TEST(ComparePlan, ArmsAreTheCombinationsThatMakeSense) {
  const auto arms = compare_arms({{"fp32", "bf16", "fp8"},
                                  {"delayed", "current", "block", "mxfp8", "nvfp4"},
                                  {"e4m3", "hybrid"}});
  EXPECT_EQ(labels(arms),
            (std::vector<std::string>{"fp32", "bf16", "fp8-delayed-e4m3", "fp8-delayed-hybrid",
                                      "fp8-current-e4m3", "fp8-current-hybrid", "fp8-block",
                                      "fp8-mxfp8", "fp8-nvfp4"}));
  EXPECT_EQ(arms[3].train_flags(), (std::vector<std::string>{"--precision", "fp8", "--recipe",
                                                             "delayed", "--fp8-format", "hybrid"}));
  EXPECT_EQ(arms[6].train_flags(),
            (std::vector<std::string>{"--precision", "fp8", "--recipe", "block"}));
  EXPECT_EQ(arms[0].train_flags(), (std::vector<std::string>{"--precision", "fp32"}));
  // Train's defaults where a list is not given: delayed scaling, hybrid.
  EXPECT_EQ(labels(compare_arms({{"bf16", "fp8"}, {}, {}})),
            (std::vector<std::string>{"bf16", "fp8-delayed-hybrid"}));
}

void expect_refused(const CompareAxes& axes, const std::string& words) {
  try {
    compare_arms(axes);
    ADD_FAILURE() << "accepted; expected an error with: " << words;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST(ComparePlan, NonsenseIsRefusedByName) {
  expect_refused({{"bf16"}, {"delayed"}, {}}, "--precision has no fp8");
  expect_refused({{"fp32"}, {}, {"e4m3"}}, "--precision has no fp8");
  expect_refused({{"fp8"}, {"mxfp8", "nvfp4"}, {"hybrid"}}, "the block recipes fix their own");
  expect_refused({{"auto"}, {}, {}}, "names fp32, bf16 or fp8");
  expect_refused({{"fp16"}, {}, {}}, "unknown precision 'fp16'");
  expect_refused({{"fp8"}, {"delayd"}, {}}, "unknown recipe 'delayd'");
  EXPECT_THROW(split_list("bf16,,fp8", "--precision"), Error);
  EXPECT_THROW(split_list("bf16,bf16", "--precision"), Error);
  EXPECT_EQ(split_list("a,b", "--x"), (std::vector<std::string>{"a", "b"}));
}

TEST(ComparePlan, SeedsAndBaseline) {
  EXPECT_EQ(compare_seeds(5, 3), (std::vector<uint64_t>{5, 6, 7}));
  EXPECT_THROW(compare_seeds(1, 0), Error);
  const auto arms = compare_arms({{"fp32", "bf16", "fp8"}, {}, {}});
  EXPECT_EQ(compare_baseline(arms, ""), "bf16");
  EXPECT_EQ(compare_baseline(arms, "fp32"), "fp32");
  EXPECT_THROW(compare_baseline(arms, "fp8"), Error);  // the arm is fp8-delayed-hybrid
  EXPECT_EQ(compare_baseline(compare_arms({{"fp8", "fp32"}, {}, {}}), ""), "fp8-delayed-hybrid");
}

}  // namespace
}  // namespace fp8lm
