// The bucket layout every bucketed strategy shares (ddp's all-reduce, zero1's and zero2's
// reduce-scatter): reverse registration order, the caps, and one dtype per bucket.
#include <gtest/gtest.h>

#include <stdexcept>
#include <vector>

#include "collectives/bucket_plan.h"

namespace ddpbench {
namespace {

using Layout = std::vector<std::vector<std::size_t>>;

TEST(BucketPlan, ReverseRegistrationOrderClosingAtTheFirstCapThenTheCap) {
  // 4 KiB, 256 B, 16 KiB, 256 B, 1 KiB, 16 B of float32
  const std::vector<torch::Tensor> params = {torch::zeros({1024}), torch::zeros({64}), torch::zeros({4096}),
                                             torch::zeros({64}),   torch::zeros({256}), torch::zeros({4})};
  BucketCaps caps;
  caps.cap_mb = 18.0 / 1024;
  caps.first_cap_mb = 2.0 / 1024;
  EXPECT_EQ(plan_buckets(params, caps), (Layout{{5, 4, 3}, {2, 1}, {0}}));
}

TEST(BucketPlan, AParameterLargerThanTheCapHasABucketOfItsOwn) {
  const std::vector<torch::Tensor> params = {torch::zeros({10}), torch::zeros({1 << 20}), torch::zeros({10})};
  BucketCaps caps;
  caps.cap_mb = 1;
  caps.first_cap_mb = 1;
  EXPECT_EQ(plan_buckets(params, caps), (Layout{{2}, {1}, {0}}));
}

TEST(BucketPlan, ADtypeChangeClosesTheBucket) {
  const std::vector<torch::Tensor> params = {torch::zeros({4}), torch::zeros({4}, torch::kFloat64), torch::zeros({4})};
  EXPECT_EQ(plan_buckets(params, BucketCaps{}), (Layout{{2}, {1}, {0}}));
}

TEST(BucketPlan, NoParametersIsRefused) {
  EXPECT_THROW(plan_buckets({}, BucketCaps{}), std::invalid_argument);
}

}  // namespace
}  // namespace ddpbench
