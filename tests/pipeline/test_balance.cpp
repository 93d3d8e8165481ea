// Cutting a chain into stages: even_split by count; balanced_split gives the least largest stage
// (checked against every cut by brute force on small chains), the even cut where the costs are
// equal, and puts a heavy unit alone; split_at takes a user's cut points and names --pp-split
// where they cannot cut the chain.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>

#include "pipeline/balance.h"

namespace ddpbench::pipeline {
namespace {

double largest(const std::vector<double>& costs, const StageSpans& spans) {
  const auto sums = stage_sums(costs, spans);
  return *std::max_element(sums.begin(), sums.end());
}

void expect_a_partition(const StageSpans& spans, std::size_t units, int stages) {
  ASSERT_EQ(spans.size(), static_cast<std::size_t>(stages));
  std::size_t at = 0;
  for (const auto& [begin, end] : spans) {
    EXPECT_EQ(begin, at);
    EXPECT_LT(begin, end) << "an empty stage";
    at = end;
  }
  EXPECT_EQ(at, units);
}

// The least largest stage over every way to cut `n` units into `stages` runs.
double brute_force(const std::vector<double>& costs, int stages, std::size_t from = 0) {
  if (stages == 1) return std::accumulate(costs.begin() + static_cast<std::ptrdiff_t>(from), costs.end(), 0.0);
  double best = std::numeric_limits<double>::infinity(), run = 0;
  for (std::size_t end = from + 1; end + static_cast<std::size_t>(stages - 1) <= costs.size(); ++end) {
    run += costs[end - 1];
    best = std::min(best, std::max(run, brute_force(costs, stages - 1, end)));
  }
  return best;
}

TEST(PipelineBalance, NamesRoundTripAndAnUnknownOneIsNone) {
  for (auto kind : {BalanceKind::Time, BalanceKind::Params, BalanceKind::Even}) EXPECT_EQ(parse_balance(to_string(kind)), kind);
  EXPECT_FALSE(parse_balance("flops").has_value());
}

TEST(PipelineBalance, EvenSplitGivesTheEarlierStagesTheRemainder) {
  EXPECT_EQ(even_split(4, 2), (StageSpans{{0, 2}, {2, 4}}));
  EXPECT_EQ(even_split(4, 3), (StageSpans{{0, 2}, {2, 3}, {3, 4}}));
  EXPECT_EQ(even_split(12, 4), (StageSpans{{0, 3}, {3, 6}, {6, 9}, {9, 12}}));
}

TEST(PipelineBalance, EqualCostsGiveTheEvenCut) {
  for (std::size_t n : {4u, 7u, 12u, 13u}) {
    for (int stages = 1; stages <= 4; ++stages) {
      EXPECT_EQ(balanced_split(std::vector<double>(n, 1.5), stages), even_split(n, stages)) << n << " units, " << stages;
    }
  }
}

TEST(PipelineBalance, AHeavyUnitGetsAStageOfItsOwn) {
  // gpt2-like: the last unit carries the output projection and the loss, 5x a block.
  const std::vector<double> costs = {1, 1, 1, 1, 1, 5};
  const auto spans = balanced_split(costs, 2);
  EXPECT_EQ(spans, (StageSpans{{0, 5}, {5, 6}}));
  EXPECT_DOUBLE_EQ(largest(costs, spans), 5);
  // mlp's four layers by multiply-adds at p = 3: the first alone, then the two 1024 x 1024 ones
  // apart, the tiny last layer with the one before it.
  const std::vector<double> mlp = {784 * 1024, 1024 * 1024, 1024 * 1024, 1024 * 10};
  EXPECT_EQ(balanced_split(mlp, 3), (StageSpans{{0, 1}, {1, 2}, {2, 4}}));
}

TEST(PipelineBalance, TheLargestStageIsTheLeastAnyCutGives) {
  std::mt19937 random(7);
  std::uniform_real_distribution<double> cost(0.1, 10);
  for (int trial = 0; trial < 200; ++trial) {
    const std::size_t n = 1 + random() % 9;
    std::vector<double> costs(n);
    for (auto& c : costs) c = cost(random);
    for (int stages = 1; stages <= static_cast<int>(n) && stages <= 4; ++stages) {
      const auto spans = balanced_split(costs, stages);
      expect_a_partition(spans, n, stages);
      EXPECT_NEAR(largest(costs, spans), brute_force(costs, stages), 1e-9);
    }
  }
}

TEST(PipelineBalance, FewerUnitsThanStagesIsRefused) {
  EXPECT_THROW(balanced_split({1, 2}, 3), std::invalid_argument);
}

TEST(PipelineBalance, SplitAtCutsWhereTold) {
  const auto r = split_at({4, 8}, 12, 3);
  EXPECT_TRUE(r.why.empty()) << r.why;
  EXPECT_EQ(r.spans, (StageSpans{{0, 4}, {4, 8}, {8, 12}}));
}

TEST(PipelineBalance, SplitAtNamesWhatCannotCut) {
  EXPECT_NE(split_at({4, 8}, 12, 2).why.find("--pp-split 4,8 cuts 3 stages, and the case runs 2"), std::string::npos);
  EXPECT_NE(split_at({8, 4}, 12, 3).why.find("must rise from 1"), std::string::npos);
  EXPECT_NE(split_at({0, 4}, 12, 3).why.find("must rise from 1"), std::string::npos);
  EXPECT_NE(split_at({4, 12}, 12, 3).why.find("cut 12 leaves the last stage no unit of the chain's 12"), std::string::npos);
}

TEST(PipelineBalance, ImbalanceIsTheLargestOverTheMean) {
  EXPECT_DOUBLE_EQ(imbalance({1, 1, 1}), 1.0);
  EXPECT_DOUBLE_EQ(imbalance({1, 3}), 1.5);
  EXPECT_DOUBLE_EQ(imbalance({}), 1.0);
}

}  // namespace
}  // namespace ddpbench::pipeline
