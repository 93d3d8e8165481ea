// zero1's and zero2's sharded buckets, ranks as threads over a real Gloo group in this process:
// each rank's SGD step on its own chunks, all-gathered, is the single-process step on the whole
// batch (world 2, 3 and 4, buckets that need padding, two steps in a row); stage 2 holds no full
// gradient buffer after a step and stage 1 does; overlap launches every bucket inside backward;
// each bucket's ready time and reduce-scatter are kept for the projection's timeline.
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>

#include <string>
#include <vector>

#include "collectives/sharded_buckets.h"
#include "collectives/shard_collectives.h"
#include "distributed/process_group.h"
#include "tests/support/gloo_ranks.h"

namespace ddpbench {
// Named, so that its file-local helpers stay apart from another test file's in a unity build.
namespace sharded_buckets_test {
namespace {

using testing::on_gloo_ranks;

constexpr int kBatch = 12;  // splits evenly at world 2, 3 and 4
constexpr double kLr = 0.1;

// 5-7-3 with an unused head: 66 trained elements (odd-sized buckets at any world), and two
// parameters that never get a gradient.
struct SmallNet {
  torch::nn::Sequential body;
  torch::nn::Linear unused{nullptr};
  std::vector<torch::Tensor> parameters() const {
    auto p = body->parameters();
    if (unused)
      for (const auto& t : unused->parameters()) p.push_back(t);
    return p;
  }
};

SmallNet small_net(bool with_unused = true) {
  torch::manual_seed(5);
  SmallNet net{torch::nn::Sequential(torch::nn::Linear(5, 7), torch::nn::Tanh(), torch::nn::Linear(7, 3)),
               with_unused ? torch::nn::Linear(2, 2) : torch::nn::Linear(nullptr)};
  net.body->to(torch::kFloat64);
  if (with_unused) net.unused->to(torch::kFloat64);
  return net;
}

struct Batch {
  torch::Tensor x, y;
};

Batch batch(int step) {
  torch::manual_seed(50 + step);
  return {torch::randn({kBatch, 5}, torch::kFloat64), torch::randn({kBatch, 3}, torch::kFloat64)};
}

// The reference: one process, the whole batch, plain SGD. Returns each step's loss.
std::vector<double> train_single(SmallNet& net, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto b = batch(s);
    auto loss = torch::nn::functional::mse_loss(net.body->forward(b.x), b.y);
    for (auto& p : net.parameters()) p.mutable_grad() = torch::Tensor();
    loss.backward();
    torch::NoGradGuard no_grad;
    for (auto& p : net.parameters())
      if (p.grad().defined()) p.sub_(kLr * p.grad());
    losses.push_back(loss.item<double>());
  }
  return losses;
}

struct RankOutcome {
  std::vector<torch::Tensor> parameters;
  std::vector<double> losses;
  std::int64_t gradient_bytes_held = 0;
  std::int64_t gradient_bytes_after_free = -1;  // of the last step, before its forward
  std::int64_t padded_bytes = 0;
  std::int64_t trained_bytes = 0;
  int buckets = 0;
  std::vector<std::int64_t> bucket_bytes;  // in launch order
  ShardTraffic traffic;
  bool autograd_grads_left = false;
  // After the last reduce-scatter: the elements of the optimizer's pieces, and of those with a gradient.
  std::int64_t piece_elements = 0, piece_elements_with_gradient = 0;
};

// Each rank: its slice of the batch, the buckets' reduce-scatter, SGD on its chunks only, all-gather.
std::vector<RankOutcome> train_sharded(int world, int steps, ShardedBucketOptions options, bool with_unused = true) {
  std::vector<SmallNet> nets;
  for (int r = 0; r < world; ++r) nets.push_back(small_net(with_unused));
  // here: one thread at a time on the generator
  std::vector<Batch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(batch(s));
  std::vector<RankOutcome> out(static_cast<std::size_t>(world));
  on_gloo_ranks(world, [&](ProcessGroupContext& group) {
    const int r = group.rank();
    auto& net = nets[static_cast<std::size_t>(r)];
    auto& o = out[static_cast<std::size_t>(r)];
    ShardedBuckets shards(net.parameters(), group, options);
    const std::int64_t local = kBatch / world;
    const double share = 1.0 / world;
    for (int s = 0; s < steps; ++s) {
      const auto x = batches[static_cast<std::size_t>(s)].x.narrow(0, r * local, local);
      const auto y = batches[static_cast<std::size_t>(s)].y.narrow(0, r * local, local);
      shards.free_gradients();  // as zero1/zero2 begin a step
      o.gradient_bytes_after_free = shards.gradient_bytes_held();
      auto loss = torch::nn::functional::mse_loss(net.body->forward(x), y);
      shards.prepare_step(share, loss.detach() * share);
      loss.backward();
      o.losses.push_back(shards.wait_reduce_scatter().item<double>());
      o.piece_elements = o.piece_elements_with_gradient = 0;
      for (const auto& piece : shards.optimizer_parameters()) {
        o.piece_elements += piece.numel();
        if (piece.grad().defined()) o.piece_elements_with_gradient += piece.numel();
      }
      {
        torch::NoGradGuard no_grad;
        for (auto& shard : shards.parameter_shards()) shard.sub_(kLr * shard.grad());
      }
      shards.all_gather_parameters();
    }
    for (const auto& p : net.parameters()) {
      o.parameters.push_back(p.detach().clone());
      o.autograd_grads_left = o.autograd_grads_left || p.grad().defined();
      o.trained_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
    }
    o.gradient_bytes_held = shards.gradient_bytes_held();
    o.padded_bytes = shards.padded_bytes();
    o.buckets = shards.bucket_count();
    for (int b = 0; b < o.buckets; ++b) o.bucket_bytes.push_back(shards.bucket_bytes(static_cast<std::size_t>(b)));
    o.traffic = shards.traffic();
  });
  return out;
}

// Buckets of at most 160 bytes (20 doubles): the 66 elements spread over several, most padded.
ShardedBucketOptions small_buckets(bool keep_full_gradients, bool overlap = true) {
  ShardedBucketOptions o;
  o.caps.cap_mb = 160.0 / (1 << 20);
  o.caps.first_cap_mb = 160.0 / (1 << 20);
  o.keep_full_gradients = keep_full_gradients;
  o.overlap = overlap;
  return o;
}

struct Stage {
  int world;
  bool keep_full_gradients;
};

class ShardedBucketsParity : public ::testing::TestWithParam<Stage> {};

TEST_P(ShardedBucketsParity, TwoStepsOnChunksThenAllGatherAreTheSingleProcessSteps) {
  const auto [world, keep_full] = GetParam();
  auto reference = small_net();
  const auto single_losses = train_single(reference, 2);
  const auto ranks = train_sharded(world, 2, small_buckets(keep_full));
  const auto expected = reference.parameters();
  for (int r = 0; r < world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& o = ranks[static_cast<std::size_t>(r)];
    ASSERT_EQ(o.parameters.size(), expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k)
      EXPECT_TRUE(torch::allclose(o.parameters[k], expected[k], 1e-12, 1e-12)) << "parameter " << k;
    for (std::size_t s = 0; s < single_losses.size(); ++s) EXPECT_NEAR(o.losses[s], single_losses[s], 1e-12);
    EXPECT_FALSE(o.autograd_grads_left) << "a gradient outlived its copy into the bucket";
    EXPECT_GT(o.buckets, 2);
    // Padding: every bucket a multiple of the world, at most world-1 elements over.
    EXPECT_GE(o.padded_bytes, o.trained_bytes);
    EXPECT_LE(o.padded_bytes, o.trained_bytes + o.buckets * (world - 1) * 8);
    EXPECT_EQ(o.padded_bytes % (world * 8), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, ShardedBucketsParity,
                         ::testing::Values(Stage{2, true}, Stage{3, true}, Stage{4, true}, Stage{2, false},
                                           Stage{3, false}, Stage{4, false}),
                         [](const auto& info) {
                           return std::string(info.param.keep_full_gradients ? "zero1" : "zero2") + "_world" +
                                  std::to_string(info.param.world);
                         });

TEST(ShardedBuckets, Stage2HoldsOnlyItsChunksAfterAStepAndStage1TheFullBuffers) {
  const int world = 2;
  const auto stage1 = train_sharded(world, 2, small_buckets(true));
  const auto stage2 = train_sharded(world, 2, small_buckets(false));
  for (int r = 0; r < world; ++r) {
    const auto& s1 = stage1[static_cast<std::size_t>(r)];
    const auto& s2 = stage2[static_cast<std::size_t>(r)];
    EXPECT_EQ(s2.gradient_bytes_held, s2.padded_bytes / world) << "rank " << r;
    EXPECT_EQ(s1.gradient_bytes_held, s1.padded_bytes) << "rank " << r << ": its chunks are views of them";
    // From the start of the next step to its reduce-scatters stage 2 holds no gradient (PyTorch 2's
    // zero_grad sets them to none); stage 1's full buffers live on, as DDP's buckets.
    EXPECT_EQ(s2.gradient_bytes_after_free, 0) << "rank " << r;
    EXPECT_EQ(s1.gradient_bytes_after_free, s1.padded_bytes) << "rank " << r;
  }
}

TEST(ShardedBuckets, OverlapLaunchesEveryBucketInsideBackwardAndNoOverlapNone) {
  // Every parameter trained: one that never gets a gradient holds back its bucket, and the buckets
  // after it, until backward ends (launches keep bucket order on every rank).
  const auto overlapped = train_sharded(2, 2, small_buckets(false, /*overlap=*/true), /*with_unused=*/false);
  const auto after = train_sharded(2, 2, small_buckets(false, /*overlap=*/false), /*with_unused=*/false);
  for (int r = 0; r < 2; ++r) {
    const auto& o = overlapped[static_cast<std::size_t>(r)];
    EXPECT_EQ(o.traffic.launched_during_backward, 2 * o.buckets);
    EXPECT_EQ(after[static_cast<std::size_t>(r)].traffic.launched_during_backward, 0);
    // The same result either way.
    for (std::size_t k = 0; k < o.parameters.size(); ++k)
      EXPECT_TRUE(torch::equal(o.parameters[k], after[static_cast<std::size_t>(r)].parameters[k])) << k;
  }
}

TEST(ShardedBuckets, TheOptimizersPiecesCoverEveryParameterAndThoseNoRankUsedHaveNoGradient) {
  for (const int world : {2, 3}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::int64_t pieces = 0, with_gradient = 0;
    for (const auto& o : train_sharded(world, 2, small_buckets(false))) {
      pieces += o.piece_elements;
      with_gradient += o.piece_elements_with_gradient;
    }
    EXPECT_EQ(pieces, 66 + 6) << "the body and the unused head, each element once over the ranks, no padding";
    EXPECT_EQ(with_gradient, 66) << "the unused head's pieces keep no gradient: an optimizer skips them";
  }
}

TEST(ShardedBuckets, TrafficCountsThePaddedBucketsEachWayAndTheLoss) {
  const auto ranks = train_sharded(3, 2, small_buckets(true));
  for (const auto& o : ranks) {
    EXPECT_EQ(o.traffic.steps, 2);
    EXPECT_EQ(o.traffic.reduce_scatter_bytes, 2 * o.padded_bytes);
    EXPECT_EQ(o.traffic.all_gather_bytes, 2 * o.padded_bytes);
    // One float64 loss a step, and the used-parameter flags (a float each of the 6 parameters): the
    // unused head keeps them going every step.
    EXPECT_EQ(o.traffic.allreduce_bytes, 2 * 8 + 2 * 6 * 4);
    EXPECT_GT(o.traffic.reduce_scatter_seconds, 0);
    EXPECT_GT(o.traffic.all_gather_seconds, 0);
  }
}

TEST(ShardedBuckets, EachBucketsReadyTimeAndReduceScatterAreKeptForTheProjectionsTimeline) {
  const auto ranks = train_sharded(2, 3, small_buckets(false), /*with_unused=*/false);
  for (const auto& o : ranks) {
    ASSERT_GT(o.buckets, 2);
    ASSERT_EQ(o.traffic.ready_seconds.size(), static_cast<std::size_t>(o.buckets));
    ASSERT_EQ(o.traffic.bucket_reduce_scatter_seconds.size(), static_cast<std::size_t>(o.buckets));
    std::int64_t bytes = 0;
    double reduce_scatter = 0;
    for (int b = 0; b < o.buckets; ++b) {
      const auto k = static_cast<std::size_t>(b);
      bytes += o.bucket_bytes[k];
      reduce_scatter += o.traffic.bucket_reduce_scatter_seconds[k];
      EXPECT_GT(o.traffic.bucket_reduce_scatter_seconds[k], 0) << b;
      EXPECT_GE(o.traffic.ready_seconds[k], 0) << "from the start of backward, bucket " << b;
    }
    EXPECT_EQ(bytes, o.padded_bytes);
    EXPECT_NEAR(reduce_scatter, o.traffic.reduce_scatter_seconds, 1e-9);
    // The last bucket launched holds the first layer's gradients, the last backward reaches.
    EXPECT_GT(o.traffic.ready_seconds.back(), o.traffic.ready_seconds.front());
  }
}

TEST(ShardedBuckets, ParametersKeepTheirValuesAsViewsOfTheBuckets) {
  on_gloo_ranks(2, [](ProcessGroupContext& group) {
    // the same weights on both ranks, with no generator shared between the threads
    auto a = torch::arange(9, torch::kFloat64).reshape({3, 3}).requires_grad_();
    auto b = (torch::arange(5, torch::kFloat64) + 100).requires_grad_();
    const auto a0 = a.detach().clone(), b0 = b.detach().clone();
    ShardedBuckets shards({a, b}, group, small_buckets(true));
    EXPECT_TRUE(torch::equal(a.detach(), a0));
    EXPECT_TRUE(torch::equal(b.detach(), b0));
    // Writing a chunk writes the parameter it covers.
    std::int64_t chunk_elements = 0;
    for (auto& shard : shards.parameter_shards()) {
      torch::NoGradGuard no_grad;
      shard.fill_(group.rank() + 1);
      chunk_elements += shard.numel();
    }
    shards.all_gather_parameters();
    const auto values = torch::cat({a.detach().flatten(), b.detach().flatten()});
    EXPECT_EQ(values.eq(1).sum().item<std::int64_t>() + values.eq(2).sum().item<std::int64_t>(), 14);
    EXPECT_GE(2 * chunk_elements, 14);
  });
}

TEST(ShardedBuckets, WaitWithoutPrepareIsAProgrammingError) {
  on_gloo_ranks(1, [](ProcessGroupContext& group) {
    auto p = torch::ones({4}, torch::kFloat64).requires_grad_();
    ShardedBuckets shards({p}, group, small_buckets(false));
    EXPECT_THROW(shards.wait_reduce_scatter(), std::logic_error);
  });
}

}  // namespace
}  // namespace sharded_buckets_test
}  // namespace ddpbench
