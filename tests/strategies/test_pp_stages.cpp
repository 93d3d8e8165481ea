// pp's profiling pass (strategies/pp_stages.h): a time a unit, every one positive, and the model
// left as it was found: convnet's BatchNorm running statistics, and no gradient. (It also puts back
// the CPU generator's state, for a user's model with dropout; no built-in workload draws from it.) (The cut it feeds is tested in test_balance.cpp; the whole plan, on real
// ranks, in test_pp.cpp.)
#include <gtest/gtest.h>

#include "strategies/pp_stages.h"

namespace ddpbench {
namespace {

TEST(PpProfile, TimesEveryUnitAndLeavesTheModelAsItFoundIt) {
  torch::manual_seed(5);
  const auto& workload = WorkloadRegistry::instance().get("convnet");
  auto model = workload.make_model();
  model->train();
  std::vector<torch::Tensor> before;
  for (const auto& b : model->distinct_buffers()) before.push_back(b.clone());
  ASSERT_FALSE(before.empty()) << "convnet's BatchNorm keeps running statistics";

  const auto seconds = profile_unit_seconds(*model, workload, 4, c10::Device(c10::kCPU), Precision::Fp32);

  ASSERT_EQ(seconds.size(), model->chain_length());
  for (double s : seconds) EXPECT_GT(s, 0);
  const auto after = model->distinct_buffers();
  for (std::size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(torch::equal(before[i], after[i])) << "buffer " << i;
  for (const auto& p : model->parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace ddpbench
