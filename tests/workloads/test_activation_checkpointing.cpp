// Activation checkpointing's autograd function and policy (workloads/activation_checkpointing.h): the
// same gradients as the unit run plainly, dropout's mask drawn again alike, the generators left as
// a plain run leaves them, autocast restored in the recomputation, and only the input kept.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <stdexcept>

#include "compat/torch_compat.h"
#include "workloads/activation_checkpointing.h"

namespace ddpbench {
namespace {

TEST(CheckpointPolicy, ParsesEachSpellingAndNamesTheUnitsItCheckpoints) {
  EXPECT_FALSE(CheckpointPolicy::parse("none").enabled());
  const auto full = CheckpointPolicy::parse("full");
  for (std::size_t u = 0; u < 4; ++u) EXPECT_TRUE(full.checkpoints(u));
  const auto every2 = CheckpointPolicy::parse("every:2");
  EXPECT_EQ(every2.to_string(), "every:2");
  // torchtitan's counting: the 2nd, 4th, ... unit.
  EXPECT_FALSE(every2.checkpoints(0));
  EXPECT_TRUE(every2.checkpoints(1));
  EXPECT_FALSE(every2.checkpoints(2));
  EXPECT_TRUE(every2.checkpoints(3));
  EXPECT_TRUE(CheckpointPolicy::parse("every:1").checkpoints(0));
  for (const char* bad : {"every:0", "every:", "every:-1", "every:x", "some", "Full", ""}) {
    EXPECT_THROW(CheckpointPolicy::parse(bad), std::invalid_argument) << bad;
  }
}

// A unit with dropout in it: its gradients depend on the mask, so a recomputation that drew another
// mask would give other gradients.
struct Unit {
  torch::nn::Linear first{16, 32}, second{32, 16};
  torch::Tensor operator()(const torch::Tensor& x) {
    return second->forward(torch::dropout(torch::gelu(first->forward(x)), 0.5, /*train=*/true));
  }
  std::vector<torch::Tensor> parameters() {
    auto p = first->parameters();
    for (const auto& t : second->parameters()) p.push_back(t);
    return p;
  }
};

struct Gradients {
  std::vector<torch::Tensor> parameters;
  torch::Tensor input;
  torch::Tensor next_draw;  // what the generator gives after the step
};

Gradients step(Unit& unit, bool checkpointed, bool input_requires_grad, int* recomputations = nullptr) {
  torch::manual_seed(7);
  auto x = torch::randn({8, 16}).requires_grad_(input_requires_grad);
  for (const auto& p : unit.parameters()) p.mutable_grad() = torch::Tensor();
  RecomputeScope scope;
  if (recomputations != nullptr) scope = [recomputations]() -> std::shared_ptr<void> {
    ++*recomputations;
    return nullptr;
  };
  auto h = checkpointed ? run_checkpointed(x, [&unit](const torch::Tensor& in) { return unit(in); }, scope) : unit(x);
  // Draws between forward and backward move the generator on: the recomputation must not see them.
  (void)torch::rand({3});
  (h * h).sum().backward();
  Gradients g;
  for (const auto& p : unit.parameters()) g.parameters.push_back(p.grad().clone());
  if (input_requires_grad) g.input = x.grad().clone();
  g.next_draw = torch::rand({4});
  return g;
}

TEST(ActivationCheckpointing, GivesThePlainRunsGradientsWithTheSameDropoutMaskAndLeavesTheGeneratorAlike) {
  torch::manual_seed(0);
  Unit unit;
  for (bool input_requires_grad : {true, false}) {
    SCOPED_TRACE(input_requires_grad ? "input requires grad" : "input is data");
    int recomputations = 0;
    const auto plain = step(unit, false, input_requires_grad);
    const auto checkpointed = step(unit, true, input_requires_grad, &recomputations);
    EXPECT_EQ(recomputations, 1);
    ASSERT_EQ(plain.parameters.size(), checkpointed.parameters.size());
    for (std::size_t i = 0; i < plain.parameters.size(); ++i) {
      // The recomputation runs the same kernels on the same values: equal to the bit.
      EXPECT_TRUE(torch::equal(plain.parameters[i], checkpointed.parameters[i])) << "parameter " << i;
    }
    if (input_requires_grad) {
      EXPECT_TRUE(torch::equal(plain.input, checkpointed.input));
    }
    EXPECT_TRUE(torch::equal(plain.next_draw, checkpointed.next_draw)) << "the recomputation moved the generator on";
  }
}

TEST(ActivationCheckpointing, RecomputesUnderTheAutocastForwardRanIn) {
  torch::manual_seed(0);
  Unit unit;
  auto run = [&](bool checkpointed) {
    torch::manual_seed(3);
    auto x = torch::randn({8, 16}).requires_grad_(true);
    for (const auto& p : unit.parameters()) p.mutable_grad() = torch::Tensor();
    torch::Tensor h;
    {
      const auto previous = compat::autocast_enter(c10::kCPU, torch::kBFloat16);
      h = checkpointed ? run_checkpointed(x, [&unit](const torch::Tensor& in) { return unit(in); }, nullptr) : unit(x);
      compat::autocast_exit(c10::kCPU, previous);
    }
    EXPECT_EQ(h.scalar_type(), torch::kBFloat16);
    h.to(torch::kFloat).sum().backward();
    return unit.parameters()[0].grad().clone();
  };
  // In fp32 the recomputation's gradients would differ from bf16's by far more than nothing.
  EXPECT_TRUE(torch::equal(run(false), run(true)));
}

TEST(ActivationCheckpointing, KeepsOnlyTheInputForBackward) {
  // Saved tensors hold their storage: the graph of a plain run keeps the unit's intermediate
  // values alive after the caller drops them, a checkpointed one only the input's.
  torch::manual_seed(0);
  Unit unit;
  auto x = torch::randn({64, 16}).requires_grad_(true);
  auto plain = unit(x);
  auto checkpointed = run_checkpointed(x, [&unit](const torch::Tensor& in) { return unit(in); }, nullptr);
  // The plain graph's nodes reach the 64x32 intermediates; the checkpointed one's first node is the
  // custom function's, whose next edges lead to the input alone (and the unused anchor).
  ASSERT_NE(checkpointed.grad_fn(), nullptr);
  EXPECT_NE(checkpointed.grad_fn()->name().find("CheckpointFunction"), std::string::npos) << checkpointed.grad_fn()->name();
  std::size_t leaf_edges = 0;
  for (const auto& edge : checkpointed.grad_fn()->next_edges()) leaf_edges += edge.is_valid() ? 1 : 0;
  EXPECT_EQ(leaf_edges, 2u) << "the input and the anchor: the parameters are reached only by the recomputation";
  EXPECT_GT(plain.grad_fn()->next_edges().size(), 0u);
}

TEST(ActivationCheckpointing, UnderNoGradRunsThePlainUnit) {
  Unit unit;
  torch::NoGradGuard no_grad;
  auto x = torch::randn({4, 16});
  const auto out = run_checkpointed(x, [&unit](const torch::Tensor& in) { return unit(in); }, nullptr);
  EXPECT_EQ(out.grad_fn(), nullptr);
}

}  // namespace
}  // namespace ddpbench
