// hogwild: the worker (shared storage, private copies, staleness) and the strategy in both modes on
// real threads and real worker processes over shared memory, steps sent ahead included, on the CPU
// and, where a GPU is, on CUDA (processes mode there over CUDA IPC, with a killed worker's device
// memory given back). Whole runs of the executable (loss, every workload, trace, faults) are in
// test_hogwild_runs.cpp.
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <thread>
#include <tuple>

#include "base/errors.h"
#include "compat/cuda_ipc.h"
#include "compat/torch_compat.h"
#include "strategies/strategy.h"
#include "strategies/hogwild_processes.h"
#include "strategies/hogwild_worker.h"
#include "tests/support/test_support.h"

namespace ddpbench {
// Named, so that its file-local helpers stay apart from another test file's in a unity build.
namespace hogwild_test {
namespace {

constexpr std::int64_t kBatch = 16;

// Copies on the CPU, where the reference gradients are taken.
struct Copies {
  std::vector<torch::Tensor> tensors;
  explicit Copies(const std::vector<torch::Tensor>& from) {
    for (const auto& t : from) tensors.push_back(t.detach().cpu().clone());
  }
};

double max_abs_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  return worst;
}

double norm(const std::vector<torch::Tensor>& ts) {
  double sum = 0;
  for (const auto& t : ts) sum += t.pow(2).sum().item<double>();
  return std::sqrt(sum);
}

std::vector<torch::Tensor> difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  std::vector<torch::Tensor> out;
  for (size_t i = 0; i < a.size(); ++i) out.push_back(a[i] - b[i]);
  return out;
}

// mlp's gradient at `parameters` on rows [begin, begin + rows) of `data`.
std::vector<torch::Tensor> gradient_at(const std::vector<torch::Tensor>& parameters, const Dataset& data,
                                       std::int64_t begin, std::int64_t rows) {
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  auto model = workload.make_model();
  auto own = model->parameters();
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < own.size(); ++i) own[i].copy_(parameters[i]);
  }
  const auto loss = workload.loss(model->forward(data.inputs.narrow(0, begin, rows)), data.targets.narrow(0, begin, rows));
  return torch::autograd::grad({loss}, own);
}

// The mode, and whether the workers train on CUDA device 0 (two workers there) or on two CPU
// virtual devices.
class HogwildStrategyTest : public ::testing::TestWithParam<std::tuple<HogwildMode, bool>> {
 protected:
  void SetUp() override {
    if (cuda() && !compat::cuda_available()) GTEST_SKIP() << "no CUDA device";
  }
  static HogwildMode mode() { return std::get<0>(GetParam()); }
  static bool cuda() { return std::get<1>(GetParam()); }
  std::unique_ptr<Strategy> start(int sync_every) {
    const auto& workload = WorkloadRegistry::instance().get("mlp");
    torch::manual_seed(7);
    auto strategy = StrategyRegistry::instance().get("hogwild").create();
    StrategySetup setup{workload, spec_, devices_, workload.make_model(), training_optimizer(workload)};
    setup.options.hogwild.mode = mode();
    setup.options.hogwild.sync_every = sync_every;
    setup.options.hogwild.worker_executable = testing::ddpbench_executable();
    setup.timeout_seconds = 60;
    strategy->setup(setup);
    return strategy;
  }
  // Step `step`'s batch where `strategy` takes it, as the harness hands it over.
  Batch batch(std::int64_t step, const Strategy& strategy) const {
    Batch b{data_.inputs.narrow(0, step * kBatch, kBatch), data_.targets.narrow(0, step * kBatch, kBatch), step, 0};
    if (const auto device = strategy.batch_device()) {
      b.inputs = b.inputs.to(*device);
      b.targets = b.targets.to(*device);
    }
    return b;
  }

  const DeviceSet devices_ = cuda() ? DeviceSet(DeviceKind::Cuda, 1, 1) : resolve_devices({"cpu", 2, 1});
  const CaseSpec spec_{"mlp", "hogwild", 2, kBatch};
  const Dataset data_ = WorkloadRegistry::instance().get("mlp").make_dataset(4 * kBatch, 3);
  PhaseRecorder phases_;
};

TEST_P(HogwildStrategyTest, EveryWorkersUpdateReachesTheSharedParameters) {
  auto strategy = start(1);
  const Copies before(strategy->trained_parameters());
  const auto loss = strategy->step(batch(0, *strategy), phases_);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  const auto change = difference(Copies(strategy->trained_parameters()).tensors, before.tensors);

  // Each worker applies -lr * its own gradient (momentum's first step is the gradient itself),
  // adding it without a lock. Where both add to one element at the same moment, one add can
  // overwrite the other (a read-modify-write race: Hogwild! without atomic adds, as PyTorch's own
  // example runs): each element then holds both updates or only one. Measured on steps where the
  // two workers' optimizer steps met: up to a third of a 1024x1024 weight's elements and 90% of a
  // bias kept only one update, and every element was one of the three to 1e-6. A worker may also
  // read the other's update, whole or in part, before it takes its gradient: how far that moves
  // the step is measured below, at the parameters after the other's whole update. A worker's
  // update missing from every element is caught by the two checks after this one.
  const double lr = 0.01;
  const auto g0 = gradient_at(before.tensors, data_, 0, kBatch / 2);
  const auto g1 = gradient_at(before.tensors, data_, kBatch / 2, kBatch / 2);
  std::vector<torch::Tensor> both, only0, only1, after0, after1, nearest;
  for (size_t i = 0; i < g0.size(); ++i) {
    both.push_back(-lr * (g0[i] + g1[i]));
    only0.push_back(-lr * g0[i]);
    only1.push_back(-lr * g1[i]);
    after0.push_back(before.tensors[i] + only0.back());
    after1.push_back(before.tensors[i] + only1.back());
    const auto off_both = (change[i] - both[i]).abs(), off0 = (change[i] - only0[i]).abs(),
               off1 = (change[i] - only1[i]).abs();
    nearest.push_back(torch::where(off_both <= torch::min(off0, off1), both[i], torch::where(off0 <= off1, only0[i], only1[i])));
  }
  const auto g1_after0 = gradient_at(after0, data_, kBatch / 2, kBatch / 2);
  const auto g0_after1 = gradient_at(after1, data_, 0, kBatch / 2);
  const double staleness = lr * (norm(difference(g1_after0, g1)) + norm(difference(g0_after1, g0)));
  EXPECT_LT(norm(difference(change, nearest)), 0.02 * norm(both) + 2 * staleness)
      << "staleness " << staleness << " of a change " << norm(both);
  EXPECT_GT(norm(difference(change, only0)), 0.5 * norm(only1)) << "worker 1's update is missing";
  EXPECT_GT(norm(difference(change, only1)), 0.5 * norm(only0)) << "worker 0's update is missing";
  // The workers took their gradients with autograd::grad: nothing landed in the shared .grad.
  for (const auto& p : strategy->trained_parameters()) EXPECT_FALSE(p.grad().defined());

  strategy->reset_measured_stats();
  strategy->step(batch(1, *strategy), phases_);
  const auto async = strategy->async_summary();
  ASSERT_TRUE(async.has_value());
  EXPECT_EQ(async->updates, 2);  // one write per worker
  EXPECT_LE(async->staleness_max, 1) << "within a step only the other worker's update can land";
  EXPECT_EQ(async->mode, to_string(mode()));
}

TEST_P(HogwildStrategyTest, SyncEveryKeepsWorkersApartBetweenSyncs) {
  auto strategy = start(3);
  const Copies initial(strategy->trained_parameters());
  for (int step = 0; step < 2; ++step) {
    strategy->step(batch(step, *strategy), phases_);
    // The workers train private copies: the shared parameters do not move before the sync.
    EXPECT_EQ(max_abs_difference(Copies(strategy->trained_parameters()).tensors, initial.tensors), 0.0)
        << "after step " << step + 1;
  }
  strategy->step(batch(2, *strategy), phases_);
  EXPECT_GT(max_abs_difference(Copies(strategy->trained_parameters()).tensors, initial.tensors), 1e-4)
      << "the sync added nothing";
  const auto async = strategy->async_summary();
  ASSERT_TRUE(async.has_value());
  EXPECT_EQ(async->updates, 2) << "one write per worker per sync";
}

INSTANTIATE_TEST_SUITE_P(Mode, HogwildStrategyTest,
                         ::testing::Combine(::testing::Values(HogwildMode::Threads, HogwildMode::Processes),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return std::string(to_string(std::get<0>(info.param))) + (std::get<1>(info.param) ? "_cuda" : "");
                         });

TEST(HogwildWorker, PrivateCopiesDivergeAndSyncAddsEachWorkersChange) {
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  torch::manual_seed(5);
  auto shared_model = workload.make_model();
  const auto shared = shared_model->parameters();
  const Copies initial(shared);
  const Dataset data = workload.make_dataset(32, 1);
  std::atomic<std::uint64_t> updates{0};
  PhaseRecorder phases;
  HogwildWorker a(workload.make_model(), shared, shared_model->buffers(), workload, training_optimizer(workload), 2, updates);
  HogwildWorker b(workload.make_model(), shared, shared_model->buffers(), workload, training_optimizer(workload), 2, updates);

  EXPECT_FALSE(a.step(data.inputs.narrow(0, 0, 8), data.targets.narrow(0, 0, 8), phases).staleness.has_value());
  EXPECT_FALSE(b.step(data.inputs.narrow(0, 8, 8), data.targets.narrow(0, 8, 8), phases).staleness.has_value());
  EXPECT_GT(max_abs_difference(a.parameters(), b.parameters()), 1e-5) << "different shards, same private copy?";
  EXPECT_EQ(max_abs_difference(shared, initial.tensors), 0.0);
  const auto sa = a.step(data.inputs.narrow(0, 16, 8), data.targets.narrow(0, 16, 8), phases);
  const auto sb = b.step(data.inputs.narrow(0, 24, 8), data.targets.narrow(0, 24, 8), phases);
  ASSERT_TRUE(sa.staleness && sb.staleness);
  EXPECT_EQ(*sa.staleness, 0);
  EXPECT_EQ(*sb.staleness, 1) << "a's sync landed between b's read and b's write";
  EXPECT_EQ(updates.load(), 2u);
  // After both syncs the shared parameters hold both workers' changes, and b restarted from them.
  EXPECT_EQ(max_abs_difference(b.parameters(), shared), 0.0);
  EXPECT_GT(max_abs_difference(shared, initial.tensors), 1e-4);
}

TEST(HogwildWorker, PlainHogwildWritesTheSharedStorageUnderItsOwnVersionCounter) {
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  auto shared_model = workload.make_model();
  const auto shared = shared_model->parameters();
  const Dataset data = workload.make_dataset(16, 2);
  std::atomic<std::uint64_t> updates{0};
  PhaseRecorder phases;
  HogwildWorker w(workload.make_model(), shared, shared_model->buffers(), workload, training_optimizer(workload), 1, updates);
  for (size_t i = 0; i < shared.size(); ++i) EXPECT_EQ(w.parameters()[i].data_ptr(), shared[i].data_ptr());
  const auto version = shared[0]._version();
  const auto u = w.step(data.inputs, data.targets, phases);
  ASSERT_TRUE(u.staleness.has_value());
  EXPECT_EQ(*u.staleness, 0);
  // The write went into the shared storage but not through the shared tensor's version counter, so
  // another worker's autograd graph over the shared tensors is not invalidated by it.
  EXPECT_EQ(shared[0]._version(), version);
}

TEST(HogwildWorker, WorkersStepTheParametersInOrdersThatStartAtTheirShareOfTheElements) {
  // mlp: 784x1024, 1024, 1024x1024, 1024, 1024x1024, 1024, 10x1024, 10 (2,913,290 elements).
  const auto parameters = WorkloadRegistry::instance().get("mlp").make_model()->distinct_parameters();
  auto indices_of = [&](const std::vector<torch::Tensor>& order) {
    std::vector<size_t> out;
    for (const auto& t : order) {
      for (size_t i = 0; i < parameters.size(); ++i)
        if (t.is_same(parameters[i])) out.push_back(i);
    }
    return out;
  };
  EXPECT_EQ(indices_of(stepping_order(parameters, 0, 2)), (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  // Half the elements (1,456,645) begin in the second weight; the first tensor that begins past it is
  // its bias, at 1,852,416: worker 1 writes the last two layers while worker 0 writes the first two.
  EXPECT_EQ(indices_of(stepping_order(parameters, 1, 2)), (std::vector<size_t>{3, 4, 5, 6, 7, 0, 1, 2}));
  // Every order is each parameter once, for any count of workers.
  for (int workers : {1, 3, 4, 9}) {
    for (int w = 0; w < workers; ++w) {
      auto order = indices_of(stepping_order(parameters, w, workers));
      std::sort(order.begin(), order.end());
      EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7})) << w << " of " << workers;
    }
  }
  EXPECT_THROW(stepping_order(parameters, 2, 2), std::logic_error);
}

// Processes mode hands the harness's next batch to the workers before this step's replies are in
// (Strategy::step's look-ahead). With one worker the updates are sequential, so the steps sent
// ahead must train exactly as the same steps sent one by one: the same losses, step by step, and the
// same parameters; and nothing is sent past the section's last step (the update count).
void steps_sent_ahead_train_as_steps_sent_one_by_one(bool cuda) {
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  const DeviceSet devices = cuda ? DeviceSet(DeviceKind::Cuda, 1, 1) : resolve_devices({"cpu", 1, 1});
  const CaseSpec spec{"mlp", "hogwild", 1, kBatch};
  const Dataset data = workload.make_dataset(6 * kBatch, 3);
  auto batch = [&](std::int64_t step) {
    return Batch{data.inputs.narrow(0, step * kBatch, kBatch), data.targets.narrow(0, step * kBatch, kBatch), step, 0};
  };
  auto train = [&](bool look_ahead, std::vector<double>& losses) {
    torch::manual_seed(7);
    auto strategy = StrategyRegistry::instance().get("hogwild").create();
    StrategySetup setup{workload, spec, devices, workload.make_model(), training_optimizer(workload)};
    setup.options.hogwild.mode = HogwildMode::Processes;
    setup.options.hogwild.workers = 1;
    setup.options.hogwild.worker_executable = testing::ddpbench_executable();
    setup.timeout_seconds = 60;
    strategy->setup(setup);
    strategy->reset_measured_stats();
    PhaseRecorder phases;
    int asked = 0;
    std::optional<Batch> ahead;
    constexpr int kSteps = 6;
    for (int step = 0; step < kSteps; ++step) {
      const Batch current = ahead ? *ahead : batch(step);
      ahead.reset();
      const NextBatch next = [&]() -> std::optional<Batch> {
        ++asked;
        if (step + 1 == kSteps) return std::nullopt;  // the section's last step
        if (!ahead) ahead = batch(step + 1);
        return ahead;
      };
      losses.push_back(strategy->step(current, phases, look_ahead ? next : NextBatch()).item<double>());
    }
    EXPECT_EQ(asked, look_ahead ? kSteps : 0) << "processes mode looks ahead at every step it is offered";
    const auto async = strategy->async_summary();
    EXPECT_TRUE(async && async->updates == kSteps) << "an update past the last step, or one missing";
    return Copies(strategy->trained_parameters());
  };
  std::vector<double> one_by_one, sent_ahead;
  const Copies expected = train(false, one_by_one);
  const Copies got = train(true, sent_ahead);
  ASSERT_EQ(sent_ahead.size(), one_by_one.size());
  for (size_t i = 0; i < one_by_one.size(); ++i) EXPECT_EQ(sent_ahead[i], one_by_one[i]) << "step " << i;
  EXPECT_EQ(max_abs_difference(got.tensors, expected.tensors), 0.0);
  EXPECT_GT(one_by_one.front() - one_by_one.back(), 0.0) << "mlp did not learn: the test would not see a lost update";
}

TEST(HogwildStrategy, ProcessesModeStepsSentAheadTrainAsStepsSentOneByOne) {
  steps_sent_ahead_train_as_steps_sent_one_by_one(/*cuda=*/false);
}

TEST(HogwildStrategy, ProcessesModeOnCudaStepsSentAheadTrainAsStepsSentOneByOne) {
  if (!compat::cuda_available()) GTEST_SKIP() << "no CUDA device";
  steps_sent_ahead_train_as_steps_sent_one_by_one(/*cuda=*/true);
}

TEST(HogwildStrategy, ProcessesModeRefusesAStepWhoseBatchIsNotTheOneSentAhead) {
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  const Dataset data = workload.make_dataset(3 * kBatch, 3);
  auto strategy = StrategyRegistry::instance().get("hogwild").create();
  StrategySetup setup{workload, CaseSpec{"mlp", "hogwild", 1, kBatch}, resolve_devices({"cpu", 1, 1}),
                      workload.make_model(), training_optimizer(workload)};
  setup.options.hogwild.mode = HogwildMode::Processes;
  setup.options.hogwild.worker_executable = testing::ddpbench_executable();
  setup.timeout_seconds = 60;
  strategy->setup(setup);
  PhaseRecorder phases;
  const Batch first{data.inputs.narrow(0, 0, kBatch), data.targets.narrow(0, 0, kBatch), 0, 0};
  const Batch second{data.inputs.narrow(0, kBatch, kBatch), data.targets.narrow(0, kBatch, kBatch), 1, 0};
  const Batch other{data.inputs.narrow(0, 2 * kBatch, kBatch), data.targets.narrow(0, 2 * kBatch, kBatch), 1, 0};
  strategy->step(first, phases, [&]() -> std::optional<Batch> { return second; });
  EXPECT_THROW(strategy->step(other, phases), std::logic_error);
}

TEST(HogwildStrategy, ProcessesModeRunsOnCuda) {
  // CUDA IPC shares the device memory: processes mode is not refused on CUDA (it was before).
  StrategyOptions options;
  options.hogwild.mode = HogwildMode::Processes;
  options.hogwild.worker_executable = testing::ddpbench_executable();
  const auto strategy = StrategyRegistry::instance().get("hogwild").create();
  const CaseSpec spec{"mlp", "hogwild", 2, kBatch};
  const auto reason = strategy->unsupported_reason(spec, DeviceSet(DeviceKind::Cuda, 1, 1), options);
  EXPECT_FALSE(reason.has_value()) << *reason;
}

// DDPBENCH_FAULT_WORKER for the lifetime of this object (the workers inherit the environment).
struct FaultInjected {
  explicit FaultInjected(const char* spec) { ::setenv("DDPBENCH_FAULT_WORKER", spec, 1); }
  ~FaultInjected() { ::unsetenv("DDPBENCH_FAULT_WORKER"); }
};

// Processes mode on CUDA, a worker SIGKILLed at its third update: the step fails naming it, no worker
// is left, and the device memory is all given back: the workers' CUDA contexts (which the driver
// frees with their processes) and the parent's IPC allocation (which the parent frees once the
// workers are reaped and its model's views are gone). The free-memory figure is the whole device's,
// so CTest runs this suite alone (RUN_SERIAL).
TEST(HogwildCudaProcesses, AKilledWorkerLeavesNoProcessAndGivesTheDeviceMemoryBack) {
  if (!compat::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  const torch::Device cuda(torch::kCUDA, 0);
  compat::cuda_set_device(0);
  {
    // The kernels this process runs below, loaded now (CUDA loads a kernel's code into device
    // memory at its first launch), so that only the workers and the shared allocation move the figure.
    auto t = torch::ones({4}, torch::TensorOptions().device(cuda));
    t.copy_(torch::zeros({4}));
    (void)torch::isfinite(t).all().item<bool>();
  }
  compat::cuda_release_cached_memory(0);  // holds nothing cached
  const std::int64_t free_before = compat::cuda_device_free_bytes(0);
  const std::int64_t ipc_before = compat::cuda_ipc_allocated_bytes();
  const Dataset data = workload.make_dataset(3 * kBatch, 3);
  std::vector<pid_t> pids;
  {
    FaultInjected fault("1:kill");
    auto model = workload.make_model();
    model->to(cuda);
    HogwildProcessesConfig config;
    config.executable = testing::ddpbench_executable();
    config.workload = &workload;
    config.workers = 2;
    config.devices = 1;
    config.cuda_device = 0;
    config.global_batch = kBatch;
    config.timeout = std::chrono::milliseconds(60000);
    HogwildProcesses processes(config, *model);
    pids = processes.worker_pids();
    EXPECT_GT(compat::cuda_ipc_allocated_bytes(), ipc_before);
    // The measure can see the workers: their contexts and the shared allocation are on the device.
    EXPECT_LT(compat::cuda_device_free_bytes(0), free_before - (64 << 20));
    std::string failure;
    for (std::int64_t step = 0; step < 3 && failure.empty(); ++step) {
      try {
        processes.send({data.inputs.narrow(0, step * kBatch, kBatch), data.targets.narrow(0, step * kBatch, kBatch), step, 0});
        const auto result = processes.wait();
        EXPECT_TRUE(std::isfinite(result.loss)) << "step " << step;
        EXPECT_EQ(result.staleness.size(), 2u) << "step " << step << ": both workers wrote";
      } catch (const CaseFailure& e) {
        failure = e.what();
      }
    }
    EXPECT_NE(failure.find("hogwild worker 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << failure;
    // The model still works on its views of the shared allocation after the failure.
    EXPECT_TRUE(torch::isfinite(model->distinct_parameters()[0]).all().item<bool>());
  }
  for (const pid_t pid : pids) {
    EXPECT_TRUE(::kill(pid, 0) != 0 && errno == ESRCH) << "worker " << pid << " is still there";
  }
  EXPECT_EQ(compat::cuda_ipc_allocated_bytes(), ipc_before) << "the IPC allocation outlived its last user";
  compat::cuda_release_cached_memory(0);
  // A dead process's context is torn down as it exits; allow the driver a moment. A worker's context
  // alone is hundreds of MiB, so 32 MiB of slack still catches one left behind.
  std::int64_t free_after = compat::cuda_device_free_bytes(0);
  for (int i = 0; i < 50 && free_after < free_before - (32 << 20); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    free_after = compat::cuda_device_free_bytes(0);
  }
  EXPECT_GE(free_after, free_before - (32 << 20))
      << "device memory not given back: " << (free_before - free_after) / (1 << 20) << " MiB";
}

}  // namespace
}  // namespace hogwild_test
}  // namespace ddpbench
