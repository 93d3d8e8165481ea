// The gradient bucketer (ddp's buckets) with two ranks as threads over a real Gloo group in this
// process: averaged gradients, bucket timelines, buckets as views, overlap, and the bucket layout.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/serialize.h>

#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <future>
#include <map>
#include <set>

#include "base/errors.h"
#include "distributed/process_group.h"
#include "distributed/rank_env.h"
#include "run/runner.h"
#include "collectives/gradient_bucketer.h"
#include "tests/support/test_support.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

// ---- the bucketer, two ranks as threads in this process -------------------------------------

torch::nn::Sequential small_model() {
  torch::manual_seed(3);
  return torch::nn::Sequential(torch::nn::Linear(16, 64), torch::nn::ReLU(), torch::nn::Linear(64, 64),
                               torch::nn::ReLU(), torch::nn::Linear(64, 4));
}

struct RankResult {
  std::vector<torch::Tensor> grads;
  double loss = 0;
  CommStats stats;
  int buckets = 0;
};

// Each rank backpropagates its half of one batch; returns the reduced gradients.
std::vector<RankResult> reduce_on_two_ranks(const BucketOptions& options) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  torch::manual_seed(11);
  const auto inputs = torch::randn({10, 16});
  const auto targets = torch::randn({10, 4});
  std::vector<RankResult> results(2);
  // Built here, not in the rank threads: the global generator is no place for two threads at once.
  std::vector<torch::nn::Sequential> models = {small_model(), small_model()};
  auto rank = [&](int r) {
    ProcessGroupContext group(store, r, 2, DeviceKind::Cpu, std::chrono::seconds(20));
    auto& model = models[static_cast<size_t>(r)];
    GradientBucketer bucketer(model->parameters(), group, options);
    const auto x = inputs.narrow(0, r * 5, 5), y = targets.narrow(0, r * 5, 5);
    for (int step = 0; step < 2; ++step) {  // the second step checks that zero_grad left things right
      bucketer.zero_grad();
      const auto loss = torch::mse_loss(model->forward(x), y);
      bucketer.prepare_step(0.5, loss.detach() * 0.5);
      loss.backward();
      bucketer.wait_all();
      results[r].loss = bucketer.unpack().item<double>();
    }
    for (const auto& p : model->parameters()) results[r].grads.push_back(p.grad().clone());
    results[r].stats = bucketer.stats();
    results[r].buckets = bucketer.bucket_count();
  };
  auto other = std::async(std::launch::async, rank, 1);
  rank(0);
  other.get();
  return results;
}

// The gradient of the whole batch's mean loss, computed on one model.
std::pair<std::vector<torch::Tensor>, double> whole_batch_gradient() {
  torch::manual_seed(11);
  const auto inputs = torch::randn({10, 16});
  const auto targets = torch::randn({10, 4});
  auto model = small_model();
  const auto loss = torch::mse_loss(model->forward(inputs), targets);
  loss.backward();
  std::vector<torch::Tensor> grads;
  for (const auto& p : model->parameters()) grads.push_back(p.grad().clone());
  return {grads, loss.item<double>()};
}

void expect_whole_batch_gradient(const std::vector<RankResult>& results) {
  const auto [expected, loss] = whole_batch_gradient();
  for (const auto& r : results) {
    ASSERT_EQ(r.grads.size(), expected.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_TRUE(torch::allclose(r.grads[i], expected[i], 1e-5, 1e-6)) << "parameter " << i;
    }
    EXPECT_NEAR(r.loss, loss, 1e-6);
  }
}

TEST(GradientBucketer, AveragesTheShardsIntoTheWholeBatchsGradient) {
  BucketOptions options;
  options.cap_mb = 0.01;  // several buckets
  options.first_cap_mb = 0.001;
  const auto results = reduce_on_two_ranks(options);
  EXPECT_GE(results[0].buckets, 3);
  expect_whole_batch_gradient(results);
}

TEST(GradientBucketer, RecordsWhenEachBucketWasReadyAndHowLongItsAllReduceTook) {
  BucketOptions options;
  options.cap_mb = 0.01;
  options.first_cap_mb = 0.001;
  for (const bool overlap : {true, false}) {
    options.overlap = overlap;
    const auto results = reduce_on_two_ranks(options);
    const auto& s = results[0].stats;
    ASSERT_EQ(s.ready_seconds.size(), static_cast<std::size_t>(results[0].buckets));
    ASSERT_EQ(s.allreduce_seconds.size(), s.ready_seconds.size());
    for (std::size_t b = 0; b < s.ready_seconds.size(); ++b) {
      EXPECT_GT(s.ready_seconds[b], 0) << "bucket " << b;
      EXPECT_GT(s.allreduce_seconds[b], 0) << "bucket " << b;
      // A chain backpropagates the last layer first: launch order is the order gradients arrive,
      // with or without overlap (ready is when the gradients arrived, not when the launch came).
      if (b > 0) {
        EXPECT_GE(s.ready_seconds[b], s.ready_seconds[b - 1]) << "bucket " << b << ", overlap " << overlap;
      }
    }
  }
}

TEST(GradientBucketer, GradientsAsBucketViewsGiveTheSameGradient) {
  BucketOptions options;
  options.cap_mb = 0.01;
  options.grad_as_bucket_view = true;
  expect_whole_batch_gradient(reduce_on_two_ranks(options));
}

TEST(GradientBucketer, OverlapLaunchesDuringBackwardAndNoOverlapAfter) {
  BucketOptions options;
  options.cap_mb = 0.01;
  options.first_cap_mb = 0.001;
  const auto overlapped = reduce_on_two_ranks(options);
  EXPECT_GT(overlapped[0].stats.launched_during_backward, 0) << "no bucket was launched while backward ran";
  options.overlap = false;
  const auto naive = reduce_on_two_ranks(options);
  EXPECT_EQ(naive[0].stats.launched_during_backward, 0);
  expect_whole_batch_gradient(naive);
  // Two steps of every bucket, and the used-parameter flags once: the first step finds every
  // parameter used on both ranks, so the second does without them.
  EXPECT_EQ(naive[0].stats.collectives, 2 * naive[0].buckets + 1);
}

TEST(GradientBucketer, BucketsFollowReverseRegistrationOrderUnderTheCap) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::vector<std::vector<std::size_t>>> layouts(2);
  std::vector<torch::nn::Sequential> models = {small_model(), small_model()};
  auto rank = [&](int r) {
    ProcessGroupContext group(store, r, 2, DeviceKind::Cpu, std::chrono::seconds(20));
    auto& model = models[static_cast<size_t>(r)];  // parameters: 16x64 (4 KiB), 64, 64x64 (16 KiB), 64, 4x64 (1 KiB), 4
    BucketOptions options;
    options.cap_mb = 18.0 / 1024;  // 18 KiB
    options.first_cap_mb = 2.0 / 1024;
    GradientBucketer bucketer(model->parameters(), group, options);
    layouts[r] = bucketer.bucket_layout();
  };
  auto other = std::async(std::launch::async, rank, 1);
  rank(0);
  other.get();
  // 16 B + 1 KiB + 256 B fit the 2 KiB first bucket; 16 KiB + 256 B the 18 KiB cap; 4 KiB does not.
  const std::vector<std::vector<std::size_t>> expected = {{5, 4, 3}, {2, 1}, {0}};
  EXPECT_EQ(layouts[0], expected);
  EXPECT_EQ(layouts[1], expected);
}

}  // namespace
}  // namespace ddpbench
