// The vocabulary-parallel loss against cross-entropy of the whole logits: ranks as threads over a
// real Gloo group, each holding its columns of the same logits (shares of uneven width included).
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/nn/functional/loss.h>
#include <torch/types.h>

#include <atomic>
#include <string>

#include "distributed/process_group.h"
#include "tests/support/gloo_ranks.h"
#include "workloads/vocab_parallel_cross_entropy.h"

namespace ddpbench {
namespace {

// Rank r's columns of a vocabulary split as evenly as it goes: the first vocabulary % world ranks one wider.
std::pair<std::int64_t, std::int64_t> share(std::int64_t vocabulary, int world, int rank) {
  const std::int64_t base = vocabulary / world, extra = vocabulary % world;
  const std::int64_t first = rank * base + std::min<std::int64_t>(rank, extra);
  return {first, base + (rank < extra ? 1 : 0)};
}

VocabAllReduce over(ProcessGroupContext& group, std::atomic<int>* calls = nullptr) {
  return [&group, calls](torch::Tensor& values, VocabReduce op) {
    if (calls != nullptr) ++*calls;
    if (op == VocabReduce::Max) {
      group.allreduce_max(values, "max");
    } else {
      group.allreduce(values, "sum");
    }
  };
}

class VocabParallel : public ::testing::TestWithParam<int> {};

TEST_P(VocabParallel, EveryRankHasTheWholeLogitsLossAndItsColumnsOfTheGradient) {
  const int world = GetParam();
  constexpr std::int64_t rows = 10, vocabulary = 13;
  torch::manual_seed(11);
  // Large logits: the loss must shift by the maximum over every rank's columns, not its own.
  const auto whole = (torch::randn({rows, vocabulary}, torch::kDouble) * 30 + 500).requires_grad_();
  const auto targets = torch::randint(0, vocabulary, {rows}, torch::kLong);
  const auto expected = torch::nn::functional::cross_entropy(whole, targets);
  const auto expected_grad = torch::autograd::grad({expected * 3.0}, {whole})[0];
  testing::on_gloo_ranks(world, [&](ProcessGroupContext& group) {
    const auto [first, width] = share(vocabulary, world, group.rank());
    const auto mine = whole.detach().narrow(1, first, width).clone().requires_grad_();
    std::atomic<int> calls{0};
    const auto loss = vocab_parallel_cross_entropy(mine, targets, first, over(group, &calls));
    EXPECT_EQ(calls.load(), 2) << "forward: the row maxima, then the target logits and sums together";
    EXPECT_TRUE(std::isfinite(loss.item<double>()));
    EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-12) << "rank " << group.rank();
    const auto grad = torch::autograd::grad({loss * 3.0}, {mine})[0];
    EXPECT_EQ(calls.load(), 2) << "backward needs no collective";
    EXPECT_TRUE(torch::allclose(grad, expected_grad.narrow(1, first, width), 1e-12, 1e-14)) << "rank " << group.rank();
  });
}

INSTANTIATE_TEST_SUITE_P(Worlds, VocabParallel, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(VocabParallelAlone, OneRankIsCrossEntropyAndFloat32LogitsGiveAFloat32Loss) {
  torch::manual_seed(12);
  const auto logits = torch::randn({6, 9}).requires_grad_();
  const auto targets = torch::randint(0, 9, {6}, torch::kLong);
  const VocabAllReduce nothing = [](torch::Tensor&, VocabReduce) {};
  const auto loss = vocab_parallel_cross_entropy(logits, targets, 0, nothing);
  const auto expected = torch::nn::functional::cross_entropy(logits, targets);
  EXPECT_EQ(loss.scalar_type(), torch::kFloat);
  EXPECT_NEAR(loss.item<double>(), expected.item<double>(), 1e-6);
  const auto grad = torch::autograd::grad({loss}, {logits})[0];
  EXPECT_TRUE(torch::allclose(grad, torch::autograd::grad({expected}, {logits})[0], 1e-5, 1e-7));
}

}  // namespace
}  // namespace ddpbench
