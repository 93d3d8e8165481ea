// The sharded strategies' collectives on CPU: rings of Gloo send/recv, ranks as threads over a real
// Gloo group in this process, checked against the all-reduce every backend has (then a slice) at
// world 2, 3 and 4, with sizes that need padding, in fp32, fp64 and (LibTorch 2.x) bf16.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "base/errors.h"
#include "collectives/shard_collectives.h"
#include "compat/c10d_compat.h"
#include "distributed/process_group.h"
#include "tests/support/gloo_ranks.h"

namespace ddpbench {
namespace {

using testing::on_gloo_ranks;

// Rank r's buffer of `numel` elements padded to the world: small whole numbers, so that every sum
// is exact in every dtype and the ring's order of additions cannot differ from the all-reduce's.
torch::Tensor whole_numbers(int rank, std::int64_t numel, int world, torch::ScalarType dtype) {
  torch::manual_seed(100 + rank);
  auto flat = torch::zeros({padded_numel(numel, world)}, torch::kFloat64);
  flat.narrow(0, 0, numel).copy_(torch::randint(-8, 9, {numel}, torch::kFloat64));
  return flat.to(dtype);
}

std::vector<torch::ScalarType> dtypes_to_test() {
  std::vector<torch::ScalarType> out{torch::kFloat32, torch::kFloat64};
  if (compat::gloo_sends_bf16()) out.push_back(torch::kBFloat16);
  return out;
}

class ShardCollectives : public ::testing::TestWithParam<int> {};

TEST_P(ShardCollectives, ReduceScatterIsAllReduceThenThisRanksSlice) {
  const int world = GetParam();
  for (const auto dtype : dtypes_to_test()) {
    for (const std::int64_t numel : {std::int64_t{1}, std::int64_t{7}, std::int64_t{12}, std::int64_t{1001}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + std::to_string(numel) + " elements");
      on_gloo_ranks(world, [&](ProcessGroupContext& group) {
        const auto mine = whole_numbers(group.rank(), numel, world, dtype);
        const std::int64_t shard = mine.numel() / world;
        auto expected = mine.clone();
        group.allreduce(expected, "all-reduce");
        auto output = torch::full({shard}, 99, mine.options());
        const auto traffic = reduce_scatter(group, mine.clone(), output, "reduce-scatter");
        EXPECT_TRUE(torch::equal(output, expected.narrow(0, group.rank() * shard, shard))) << "rank " << group.rank();
        // each rank sent N-1 of its N chunks: (N-1)/N of the payload, half an all-reduce's
        EXPECT_EQ(traffic.bytes_sent, (world - 1) * shard * static_cast<std::int64_t>(mine.element_size()));
      });
    }
  }
}

TEST_P(ShardCollectives, ReduceScatterIntoItsInputsOwnChunkIsTheSameSlice) {
  // zero1's gradient chunks are views of the bucket they are reduced from: the output is the input's
  // chunk `rank`, which the ring must not use as its receive buffer.
  const int world = GetParam();
  for (const auto dtype : dtypes_to_test()) {
    SCOPED_TRACE(c10::toString(dtype));
    on_gloo_ranks(world, [&](ProcessGroupContext& group) {
      const auto mine = whole_numbers(group.rank(), 1001, world, dtype);
      const std::int64_t shard = mine.numel() / world;
      auto expected = mine.clone();
      group.allreduce(expected, "all-reduce");
      auto input = mine.clone();
      auto output = input.narrow(0, group.rank() * shard, shard);
      reduce_scatter(group, input, output, "reduce-scatter in place");
      EXPECT_TRUE(torch::equal(output, expected.narrow(0, group.rank() * shard, shard))) << "rank " << group.rank();
    });
  }
}

TEST_P(ShardCollectives, AllGatherPutsEveryRanksShardInRankOrder) {
  const int world = GetParam();
  for (const auto dtype : dtypes_to_test()) {
    for (const std::int64_t numel : {std::int64_t{1}, std::int64_t{7}, std::int64_t{1001}}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + ", " + std::to_string(numel) + " elements");
      on_gloo_ranks(world, [&](ProcessGroupContext& group) {
        const std::int64_t shard = padded_numel(numel, world) / world;
        const auto mine = whole_numbers(group.rank(), shard, 1, dtype);
        // What gathering means, from the all-reduce: each rank's shard in its place, zeros elsewhere, summed.
        auto expected = torch::zeros({shard * world}, mine.options());
        expected.narrow(0, group.rank() * shard, shard).copy_(mine);
        group.allreduce(expected, "all-reduce");
        auto output = torch::full({shard * world}, 99, mine.options());
        const auto traffic = all_gather(group, mine, output, "all-gather");
        EXPECT_TRUE(torch::equal(output, expected)) << "rank " << group.rank();
        EXPECT_EQ(traffic.bytes_sent, (world - 1) * shard * static_cast<std::int64_t>(mine.element_size()));
      });
    }
  }
}

TEST_P(ShardCollectives, GatheringWhatWasScatteredGivesTheAllReduceOfRealValues) {
  // Normal values: the ring adds in another order than Gloo's all-reduce, so they agree to rounding.
  const int world = GetParam();
  on_gloo_ranks(world, [&](ProcessGroupContext& group) {
    torch::manual_seed(7 + group.rank());
    const auto mine = torch::randn({padded_numel(100003, world)});
    auto expected = mine.clone();
    group.allreduce(expected, "all-reduce");
    auto shard = torch::empty({mine.numel() / world});
    reduce_scatter(group, mine.clone(), shard, "reduce-scatter");
    auto whole = torch::empty_like(mine);
    all_gather(group, shard, whole, "all-gather");
    EXPECT_TRUE(torch::allclose(whole, expected, 1e-5, 1e-5)) << (whole - expected).abs().max().item<float>();
  });
}

INSTANTIATE_TEST_SUITE_P(World, ShardCollectives, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(ShardCollectives, PaddingMakesEqualShards) {
  EXPECT_EQ(padded_numel(7, 4), 8);
  EXPECT_EQ(padded_numel(8, 4), 8);
  EXPECT_EQ(padded_numel(1, 3), 3);
  EXPECT_EQ(padded_numel(0, 3), 0);
}

TEST(ShardCollectives, ABufferThatDoesNotSplitIsRefusedSaying) {
  on_gloo_ranks(2, [](ProcessGroupContext& group) {
    auto output = torch::empty({3});
    try {
      reduce_scatter(group, torch::ones({7}), output, "grads of unit 0");
      ADD_FAILURE() << "7 elements were split into 2 shards of 3";
    } catch (const CaseFailure& e) {
      EXPECT_NE(std::string(e.what()).find("grads of unit 0: 7 elements do not split into 2 shards of 3"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ShardCollectives, Bf16OnGlooIsRefusedInOneLineWhereGlooCannotSendIt) {
  if (compat::gloo_sends_bf16()) {
    // LibTorch 2.x: sent like any other dtype (the tests above include it)
    on_gloo_ranks(2, [](ProcessGroupContext& group) {
      auto out = torch::empty({2}, torch::kBFloat16);
      EXPECT_NO_THROW(all_gather(group, torch::ones({1}, torch::kBFloat16), out, "all-gather"));
      EXPECT_TRUE(torch::equal(out, torch::ones({2}, torch::kBFloat16)));
    });
    return;
  }
  on_gloo_ranks(2, [](ProcessGroupContext& group) {
    auto out = torch::empty({2}, torch::kBFloat16);
    try {
      all_gather(group, torch::ones({1}, torch::kBFloat16), out, "params of unit 1");
      ADD_FAILURE() << "1.x's Gloo was handed bf16";
    } catch (const CaseFailure& e) {
      EXPECT_EQ(std::string(e.what()),
                "params of unit 1: this LibTorch's Gloo (1.x) cannot send bf16 tensors; LibTorch 2.x's can");
    }
  });
}

TEST(ShardCollectives, APeerThatNeverComesIsACommFailureWithinTheTimeout) {
  const auto started = std::chrono::steady_clock::now();
  on_gloo_ranks(
      2,
      [](ProcessGroupContext& group) {
        if (group.rank() == 1) return;  // joins the group, then never takes part
        auto out = torch::empty({4});
        EXPECT_THROW(reduce_scatter(group, torch::ones({8}), out, "reduce-scatter"), CommFailure);
      },
      std::chrono::seconds(2));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), 15);
}

}  // namespace
}  // namespace ddpbench
