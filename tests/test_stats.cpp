#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>

#include "harness/stats.h"

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

TEST(Stats, EmptyInputIsAnError) {
  EXPECT_THROW(stats::median({}), std::invalid_argument);
  EXPECT_THROW(stats::percentile({1.0}, 1.5), std::invalid_argument);
}

}  // namespace
}  // namespace ddpbench
