#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "base/stats.h"

namespace ddpbench {
namespace {

TEST(Stats, MedianOfOddAndEvenCounts) {
  EXPECT_DOUBLE_EQ(stats::median({5, 1, 3}), 3.0);
  EXPECT_DOUBLE_EQ(stats::median({4, 1, 3, 2}), 2.5);
}

TEST(Stats, PercentileInterpolatesLikeNumpy) {
  const std::vector<double> xs = {10, 20, 30, 40, 50};
  EXPECT_DOUBLE_EQ(stats::percentile(xs, 0.0), 10);
  EXPECT_DOUBLE_EQ(stats::percentile(xs, 1.0), 50);
  EXPECT_DOUBLE_EQ(stats::percentile(xs, 0.1), 14);  // numpy.percentile(xs, 10) == 14.0
  EXPECT_DOUBLE_EQ(stats::percentile(xs, 0.9), 46);
}

TEST(Stats, SampleStddevAndCv) {
  const std::vector<double> xs = {2, 4, 4, 4, 5, 5, 7, 9};
  EXPECT_DOUBLE_EQ(stats::mean(xs), 5.0);
  EXPECT_NEAR(stats::stddev(xs), std::sqrt(32.0 / 7.0), 1e-12);
  EXPECT_NEAR(stats::cv(xs), std::sqrt(32.0 / 7.0) / 5.0, 1e-12);
  EXPECT_DOUBLE_EQ(stats::stddev({3.0}), 0.0);
}

TEST(Stats, MedianConfidenceIntervalUsesTheBinomialOrderStatistics) {
  std::vector<double> ten, hundred;
  for (int i = 1; i <= 10; ++i) ten.push_back(i);
  for (int i = 1; i <= 100; ++i) hundred.push_back(101 - i);  // unsorted input
  // n = 10: ranks 2 and 9 (coverage 97.9%); n = 100: ranks 40 and 61 (the textbook table).
  const auto ci10 = stats::median_confidence_interval(ten);
  ASSERT_TRUE(ci10.has_value());
  EXPECT_DOUBLE_EQ(ci10->low, 2);
  EXPECT_DOUBLE_EQ(ci10->high, 9);
  const auto ci100 = stats::median_confidence_interval(hundred);
  ASSERT_TRUE(ci100.has_value());
  EXPECT_DOUBLE_EQ(ci100->low, 40);
  EXPECT_DOUBLE_EQ(ci100->high, 61);
  // Five samples cannot give 95%: even [min, max] covers only 1 - 2/32 = 93.75%.
  EXPECT_FALSE(stats::median_confidence_interval({1, 2, 3, 4, 5}).has_value());
  EXPECT_TRUE(stats::median_confidence_interval({1, 2, 3, 4, 5, 6}).has_value());
}

TEST(Stats, TQuantilesMatchTheTableAndTheNormalBeyondIt) {
  EXPECT_DOUBLE_EQ(stats::t95(1), 12.706);
  EXPECT_DOUBLE_EQ(stats::t95(4), 2.776);
  EXPECT_NEAR(stats::t95(40), 2.021, 1e-3);   // the table's value at 40
  EXPECT_NEAR(stats::t95(120), 1.980, 1e-3);  // and at 120
  EXPECT_NEAR(stats::t95(1000000), 1.960, 1e-3);
}

TEST(Stats, RelativeHalfWidthOfTheMeansInterval) {
  // mean 10, sample stddev 1, n 4: 3.182 x 1 / 2 / 10.
  EXPECT_NEAR(*stats::relative_ci95_half_width({9, 9, 11, 11}), 3.182 * (std::sqrt(4.0 / 3) / 2) / 10, 1e-12);
  EXPECT_FALSE(stats::relative_ci95_half_width({5}).has_value());
  EXPECT_DOUBLE_EQ(*stats::relative_ci95_half_width({5, 5, 5}), 0.0);
}

TEST(Stats, EmptyInputIsAnError) {
  EXPECT_THROW(stats::median({}), std::invalid_argument);
  EXPECT_THROW(stats::percentile({1.0}, 1.5), std::invalid_argument);
}

}  // namespace
}  // namespace ddpbench
