// fsdp's sharded units, ranks as threads over a real Gloo group in this process: two steps of SGD on
// each rank's chunks, with every unit gathered around its forward and backward, are the
// single-process steps on the whole batch (world 2, 3 and 4, units that need padding, resharding
// after forward or not, prefetch or not); between steps no full parameter is held; the all-gathered
// bytes are twice the units' with resharding after forward and once without; a unit's parameters, its
// gradients and its gradient buffer are never whole at once (the step's peak, counted per rank).
#include <gtest/gtest.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>

#include <sys/resource.h>

#include <functional>
#include <string>
#include <vector>

#include "collectives/sharded_units.h"
#include "devices/counting_allocator.h"
#include "distributed/process_group.h"
#include "tests/support/gloo_ranks.h"

namespace ddpbench {
// Named, so that its file-local helpers stay apart from another test file's in a unity build.
namespace sharded_units_test {
namespace {

using testing::on_gloo_ranks;

constexpr int kBatch = 12;  // splits evenly at world 2, 3 and 4
constexpr double kLr = 0.1;

// 5-7-3, each layer a unit (42 and 24 elements: padding at world 4 and 5), and a head that is in
// no unit (the root) and never gets a gradient.
struct SmallNet {
  torch::nn::Linear first{nullptr}, second{nullptr}, unused{nullptr};
  std::vector<torch::Tensor> parameters() const {
    auto p = first->parameters();
    for (const auto& t : second->parameters()) p.push_back(t);
    for (const auto& t : unused->parameters()) p.push_back(t);
    return p;
  }
  static std::vector<std::vector<std::size_t>> units() { return {{0, 1}, {2, 3}}; }  // the root: 4, 5
};

SmallNet small_net() {
  torch::manual_seed(5);
  SmallNet net{torch::nn::Linear(5, 7), torch::nn::Linear(7, 3), torch::nn::Linear(2, 2)};
  for (auto* m : {&net.first, &net.second, &net.unused}) (*m)->to(torch::kFloat64);
  return net;
}

struct Batch {
  torch::Tensor x, y;
};

Batch batch(int step) {
  torch::manual_seed(50 + step);
  return {torch::randn({kBatch, 5}, torch::kFloat64), torch::randn({kBatch, 3}, torch::kFloat64)};
}

std::vector<double> train_single(SmallNet& net, int steps) {
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    const auto b = batch(s);
    auto loss = torch::nn::functional::mse_loss(net.second->forward(net.first->forward(b.x).tanh()), b.y);
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
  std::int64_t full_bytes_after_forward = -1;  // of the last step
  std::int64_t full_bytes_between_steps = -1;
  std::int64_t gradient_bytes_between_steps = -1;
  std::int64_t gradient_bytes_after_free = -1;  // of the last step, before its forward
  std::int64_t padded_bytes = 0;
  std::vector<std::int64_t> unit_bytes;
  UnitTraffic traffic;
};

// Each rank: its slice of the batch through the units as fsdp's hooks drive them, SGD on its chunks.
std::vector<RankOutcome> train_sharded(int world, int steps, ShardedUnitOptions options) {
  std::vector<SmallNet> nets;
  for (int r = 0; r < world; ++r) nets.push_back(small_net());
  std::vector<Batch> batches;
  for (int s = 0; s < steps; ++s) batches.push_back(batch(s));
  std::vector<RankOutcome> out(static_cast<std::size_t>(world));
  on_gloo_ranks(world, [&](ProcessGroupContext& group) {
    const int r = group.rank();
    auto& net = nets[static_cast<std::size_t>(r)];
    auto& o = out[static_cast<std::size_t>(r)];
    ShardedUnits units(net.parameters(), SmallNet::units(), group, options);
    auto run_unit = [&](std::size_t u, const std::function<torch::Tensor()>& body) {
      units.before_forward(u);
      auto output = body();
      units.after_forward(u);
      output.register_hook([&units, u](const torch::Tensor&) { units.before_backward(u); });
      return output;
    };
    const std::int64_t local = kBatch / world;
    for (int s = 0; s < steps; ++s) {
      const auto x = batches[static_cast<std::size_t>(s)].x.narrow(0, r * local, local);
      const auto y = batches[static_cast<std::size_t>(s)].y.narrow(0, r * local, local);
      units.free_gradients();  // as fsdp begins a step
      o.gradient_bytes_after_free = units.gradient_bytes_held();
      units.begin_step(1.0 / world, nullptr);
      const auto h = run_unit(0, [&] { return net.first->forward(x).tanh(); });
      const auto out_ = run_unit(1, [&] { return net.second->forward(h); });
      auto loss = torch::nn::functional::mse_loss(out_, y);
      o.full_bytes_after_forward = units.full_parameter_bytes_held();
      units.set_loss(loss.detach() / world);
      loss.backward();
      o.losses.push_back(units.finish_backward().item<double>());
      torch::NoGradGuard no_grad;
      for (auto& shard : units.parameter_shards()) shard.sub_(kLr * shard.grad());
    }
    o.full_bytes_between_steps = units.full_parameter_bytes_held();
    o.gradient_bytes_between_steps = units.gradient_bytes_held();
    o.padded_bytes = units.padded_bytes();
    for (std::size_t u = 0; u < units.unit_count(); ++u) o.unit_bytes.push_back(units.unit_numel(u) * 8);
    o.traffic = units.traffic();
    for (const auto& p : units.gather_full_parameters()) o.parameters.push_back(p.clone());
  });
  return out;
}

struct Setting {
  int world;
  bool reshard_after_forward;
  bool prefetch;
};

class ShardedUnitsParity : public ::testing::TestWithParam<Setting> {};

TEST_P(ShardedUnitsParity, TwoStepsOnChunksAreTheSingleProcessSteps) {
  const auto setting = GetParam();
  auto reference = small_net();
  const auto single_losses = train_single(reference, 2);
  ShardedUnitOptions options;
  options.reshard_after_forward = setting.reshard_after_forward;
  options.prefetch = setting.prefetch;
  const auto ranks = train_sharded(setting.world, 2, options);
  const auto expected = reference.parameters();
  for (int r = 0; r < setting.world; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto& o = ranks[static_cast<std::size_t>(r)];
    ASSERT_EQ(o.parameters.size(), expected.size());
    for (std::size_t k = 0; k < expected.size(); ++k)
      EXPECT_TRUE(torch::allclose(o.parameters[k], expected[k], 1e-12, 1e-12)) << "parameter " << k;
    for (std::size_t s = 0; s < single_losses.size(); ++s) EXPECT_NEAR(o.losses[s], single_losses[s], 1e-12);
    // Between steps: no full parameter, and the gradient chunks only.
    EXPECT_EQ(o.full_bytes_between_steps, 0);
    EXPECT_EQ(o.gradient_bytes_between_steps, o.padded_bytes / setting.world);
    // The chunks go when the next step begins (PyTorch 2's zero_grad sets them to none) and come
    // back with the reduce-scatters: the second step's losses and parameters above hold with them.
    EXPECT_EQ(o.gradient_bytes_after_free, 0);
    ASSERT_EQ(o.unit_bytes.size(), 3u);  // two units and the root
    // After forward: the root, and the units too unless resharded.
    const std::int64_t root = o.unit_bytes[2];
    EXPECT_EQ(o.full_bytes_after_forward,
              setting.reshard_after_forward ? root : o.unit_bytes[0] + o.unit_bytes[1] + root);
    EXPECT_EQ(o.padded_bytes % (setting.world * 8), 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Settings, ShardedUnitsParity,
                         ::testing::Values(Setting{2, true, true}, Setting{3, true, true}, Setting{4, true, true},
                                           Setting{3, false, true}, Setting{3, true, false}, Setting{4, false, false}),
                         [](const auto& info) {
                           return "world" + std::to_string(info.param.world) +
                                  (info.param.reshard_after_forward ? "_reshard" : "_keep") +
                                  (info.param.prefetch ? "_prefetch" : "_noprefetch");
                         });

TEST(ShardedUnits, AllGathersEachUnitTwiceAStepWhenReshardedAfterForwardAndOnceWhenNot) {
  const int world = 3;
  for (const bool reshard : {true, false}) {
    SCOPED_TRACE(reshard ? "reshard after forward" : "keep until backward");
    ShardedUnitOptions options;
    options.reshard_after_forward = reshard;
    const auto ranks = train_sharded(world, 2, options);
    for (const auto& o : ranks) {
      const std::int64_t units = o.unit_bytes[0] + o.unit_bytes[1], root = o.unit_bytes[2];
      EXPECT_EQ(o.traffic.steps, 2);
      EXPECT_EQ(o.traffic.all_gather_bytes, 2 * ((reshard ? 2 : 1) * units + root));
      EXPECT_EQ(o.traffic.reduce_scatter_bytes, 2 * o.padded_bytes);
      EXPECT_GT(o.traffic.all_gather_seconds, 0);
      EXPECT_GT(o.traffic.reduce_scatter_seconds, 0);
    }
  }
}

// Two units of one 1024x1024 float32 weight each (U = 4 MiB) at world 2, resharding after forward,
// prefetch and overlap on (fsdp's defaults). `body(group, device, step)` runs on every rank; each
// rank counts its memory against a virtual device of its own, which its CommThread inherits.
constexpr int kLargeWorld = 2;
constexpr std::int64_t kFeatures = 1024, kUnitBytes = kFeatures * kFeatures * 4;

void on_two_large_units(const std::function<void(ProcessGroupContext&, int, const std::function<void()>&)>& body) {
  CpuMemoryCounter::install();
  on_gloo_ranks(kLargeWorld, [&](ProcessGroupContext& group) {
    const int device = 10 + group.rank();
    CpuMemoryCounter::DeviceScope scope(device);
    torch::manual_seed(7);
    torch::nn::Linear first(torch::nn::LinearOptions(kFeatures, kFeatures).bias(false));
    torch::nn::Linear second(torch::nn::LinearOptions(kFeatures, kFeatures).bias(false));
    std::vector<torch::Tensor> parameters{first->weight, second->weight};
    ShardedUnits units(parameters, {{0}, {1}}, group, {});
    const auto x = torch::randn({6, kFeatures}), y = torch::randn({6, kFeatures});
    auto run_unit = [&](std::size_t u, torch::nn::Linear& layer, const torch::Tensor& input) {
      units.before_forward(u);
      auto output = layer->forward(input);
      units.after_forward(u);
      output.register_hook([&units, u](const torch::Tensor&) { units.before_backward(u); });
      return output;
    };
    const std::function<void()> step = [&] {
      units.free_gradients();
      units.begin_step(1.0 / kLargeWorld, nullptr);
      const auto h = run_unit(0, first, x).tanh();
      auto loss = torch::nn::functional::mse_loss(run_unit(1, second, h), y);
      units.set_loss(loss.detach() / kLargeWorld);
      loss.backward();
      units.finish_backward();
      units.free_gradients();
    };
    body(group, device, step);
  });
}

// In unit 1's backward unit 0 is prefetched beside it; in unit 0's backward unit 1's reduce-scatter
// may still be in flight (its buffer U and its chunk U/2). A unit's own parameters, gradients and
// gradient buffer take 2U at most, if the parameters are freed before the buffer is made: the peak
// above what the rank holds before the step is then at most 3U + U/2. Copying each gradient into
// the buffer as it comes (the parameters still whole) peaks at 4U, in unit 1's backward.
TEST(ShardedUnits, AUnitsParametersGradientsAndGradientBufferAreNeverWholeAtOnce) {
  std::vector<std::int64_t> step_peak(kLargeWorld, -1);
  on_two_large_units([&](ProcessGroupContext& group, int device, const std::function<void()>& step) {
    step();  // the first step's one-off allocations
    group.barrier("before the measured step");
    if (group.rank() == 0) CpuMemoryCounter::reset_peaks();
    group.barrier("peaks reset");
    const std::int64_t held = CpuMemoryCounter::current_bytes(device);
    step();
    step_peak[static_cast<std::size_t>(group.rank())] = CpuMemoryCounter::peak_bytes(device) - held;
  });
  for (int r = 0; r < kLargeWorld; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const auto peak = step_peak[static_cast<std::size_t>(r)];
    EXPECT_GE(peak, 2 * kUnitBytes) << "a unit and its gradient at least";
    // Activations and the loss: a few batches of 6 x 1024 floats, well under 1 MiB.
    EXPECT_LE(peak, 3 * kUnitBytes + kUnitBytes / kLargeWorld + (1 << 20))
        << "peak above what is held: " << peak / (1 << 20) << " MiB, units of " << kUnitBytes / (1 << 20) << " MiB";
  }
}

// Every step frees and allocates each unit's full parameters (twice) and gradient buffer. Those must
// come back from the process, as a GPU's caching allocator keeps its blocks, not as fresh pages from
// the kernel: with trixie's glibc 2.41 and LibTorch 2.6 the page faults made mlp under fsdp at world
// 2 five times slower (devices/counting_allocator.cpp). A step allocates about thirteen units' worth
// over the two ranks; without the fix trixie faulted 6.3 to 10.2 units' pages a step (five runs),
// with it 0 to 0.2. Bookworm's glibc 2.36 and LibTorch 1.13 fault 0.7 to 3.7 units' pages either way
// and run fsdp at full speed; the bound lies between the two.
TEST(ShardedUnits, EachStepsBuffersAreReusedWithoutFreshPageFaults) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer's allocator replaces glibc's and holds freed memory in quarantine";
#endif
  constexpr int kSteps = 5;
  constexpr std::int64_t kPage = 4096;
  long faults = -1;
  on_two_large_units([&](ProcessGroupContext& group, int, const std::function<void()>& step) {
    for (int s = 0; s < 3; ++s) step();
    rusage before{}, after{};
    group.barrier("before the counted steps");
    if (group.rank() == 0) getrusage(RUSAGE_SELF, &before);
    group.barrier("counting");
    for (int s = 0; s < kSteps; ++s) step();
    group.barrier("after the counted steps");
    if (group.rank() == 0) {
      getrusage(RUSAGE_SELF, &after);
      faults = after.ru_minflt - before.ru_minflt;
    }
  });
  EXPECT_LT(faults / kSteps, 5 * kUnitBytes / kPage)
      << "minor page faults a step, both ranks: " << faults / kSteps << "; one unit is " << kUnitBytes / kPage << " pages";
}

TEST(ShardedUnits, ParametersAreViewsOfFreedMemoryBetweenSteps) {
  auto net = small_net();
  on_gloo_ranks(1, [&](ProcessGroupContext& group) {
    ShardedUnits units(net.parameters(), SmallNet::units(), group, {});
    for (const auto& p : net.parameters()) {
      EXPECT_EQ(p.storage().nbytes(), 0u) << "a full parameter outlived the sharding";
      EXPECT_TRUE(p.requires_grad()) << "the parameter keeps its autograd identity";
    }
    // One chunk per unit, the root's last, as the optimizer's parameters.
    ASSERT_EQ(units.parameter_shards().size(), 3u);
    EXPECT_EQ(units.parameter_shards()[0].numel(), 5 * 7 + 7);
  });
}

TEST(ShardedUnits, AParameterInTwoUnitsIsAProgrammingError) {
  auto net = small_net();
  on_gloo_ranks(1, [&](ProcessGroupContext& group) {
    EXPECT_THROW(ShardedUnits(net.parameters(), {{0, 1}, {1, 2}}, group, {}), std::logic_error);
  });
}

}  // namespace
}  // namespace sharded_units_test
}  // namespace ddpbench
