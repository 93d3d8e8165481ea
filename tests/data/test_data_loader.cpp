#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <algorithm>
#include <set>

#include "data/data_loader.h"

namespace ddpbench {
namespace {

TEST(EpochSampler, ShardsPartitionTheGlobalBatch) {
  const EpochSampler whole(64, 12, 5, {0, 1});
  for (std::int64_t step = 0; step < 10; ++step) {
    std::vector<std::int64_t> joined;
    for (int rank = 0; rank < 3; ++rank) {
      const auto part = EpochSampler(64, 12, 5, {rank, 3}).indices(step);
      EXPECT_EQ(part.size(), 4u);
      joined.insert(joined.end(), part.begin(), part.end());
    }
    auto expected = whole.indices(step);
    std::sort(joined.begin(), joined.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(joined, expected) << "step " << step;
  }
}

TEST(EpochSampler, EachEpochVisitsEverySampleOnceInANewOrder) {
  const EpochSampler sampler(40, 10, 9, {0, 1});
  ASSERT_EQ(sampler.steps_per_epoch(), 4);
  std::vector<std::int64_t> epoch0, epoch1;
  for (int s = 0; s < 4; ++s) {
    auto a = sampler.indices(s), b = sampler.indices(s + 4);
    epoch0.insert(epoch0.end(), a.begin(), a.end());
    epoch1.insert(epoch1.end(), b.begin(), b.end());
  }
  EXPECT_NE(epoch0, epoch1);  // reshuffled
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  EXPECT_EQ(epoch0, epoch1);
  EXPECT_EQ(std::set<std::int64_t>(epoch0.begin(), epoch0.end()).size(), 40u);
}

TEST(EpochSampler, DatasetSmallerThanABatchIsRejected) {
  EXPECT_THROW(EpochSampler(8, 16, 0, {0, 1}), std::exception);
}

TEST(BatchLoader, WorkersDeliverTheSameBatchesInOrder) {
  Dataset data{torch::arange(200, torch::kFloat32).reshape({100, 2}), torch::arange(100, torch::kInt64)};
  BatchLoader inline_loader(data, EpochSampler(100, 8, 1, {0, 1}), {0, false, 2});
  BatchLoader threaded(data, EpochSampler(100, 8, 1, {0, 1}), {3, false, 2});
  for (int step = 0; step < 30; ++step) {  // crosses epoch boundaries (12 steps per epoch)
    const Batch a = inline_loader.next(), b = threaded.next();
    EXPECT_EQ(a.step, step);
    EXPECT_EQ(b.step, step);
    EXPECT_TRUE(torch::equal(a.inputs, b.inputs));
    EXPECT_TRUE(torch::equal(a.targets, b.targets));
    // Rows stay paired with their targets.
    EXPECT_TRUE(torch::equal(a.inputs.select(1, 0), a.targets.to(torch::kFloat32) * 2));
  }
}

}  // namespace
}  // namespace ddpbench
