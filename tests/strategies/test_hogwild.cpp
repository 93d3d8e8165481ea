// hogwild: the worker (shared storage, private copies, staleness), the strategy in both modes on
// real threads and real worker processes over shared memory, and whole runs: the loss falls, every
// workload runs, and a killed, hung or interrupted run leaves no process and no shared memory behind.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/autograd.h>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <set>

#include "run/runner.h"
#include "strategies/strategy.h"
#include "strategies/hogwild_worker.h"
#include "tests/support/test_support.h"

namespace ddpbench {
// Named, so that its file-local helpers stay apart from another test file's in a unity build.
namespace hogwild_test {
namespace {

using nlohmann::json;
using testing::find_case;
using testing::read_text;
using testing::suite_workload_list;
using testing::run_process;
using testing::ScratchDir;

constexpr std::int64_t kBatch = 16;

struct Copies {
  std::vector<torch::Tensor> tensors;
  explicit Copies(const std::vector<torch::Tensor>& from) {
    for (const auto& t : from) tensors.push_back(t.detach().clone());
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

class HogwildStrategyTest : public ::testing::TestWithParam<HogwildMode> {
 protected:
  std::unique_ptr<Strategy> start(int sync_every) {
    const auto& workload = WorkloadRegistry::instance().get("mlp");
    torch::manual_seed(7);
    auto strategy = StrategyRegistry::instance().get("hogwild").create();
    StrategySetup setup{workload, spec_, devices_, workload.make_model(), training_optimizer(workload)};
    setup.options.hogwild.mode = GetParam();
    setup.options.hogwild.sync_every = sync_every;
    setup.options.hogwild.worker_executable = testing::ddpbench_executable();
    setup.timeout_seconds = 60;
    strategy->setup(setup);
    return strategy;
  }
  Batch batch(std::int64_t step) const {
    return {data_.inputs.narrow(0, step * kBatch, kBatch), data_.targets.narrow(0, step * kBatch, kBatch), step, 0};
  }

  const DeviceSet devices_ = resolve_devices({"cpu", 2, 1});
  const CaseSpec spec_{"mlp", "hogwild", 2, kBatch};
  const Dataset data_ = WorkloadRegistry::instance().get("mlp").make_dataset(4 * kBatch, 3);
  PhaseRecorder phases_;
};

TEST_P(HogwildStrategyTest, EveryWorkersUpdateReachesTheSharedParameters) {
  auto strategy = start(1);
  const Copies before(strategy->trained_parameters());
  const auto loss = strategy->step(batch(0), phases_);
  EXPECT_TRUE(std::isfinite(loss.item<double>()));
  const auto change = difference(strategy->trained_parameters(), before.tensors);

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
  strategy->step(batch(1), phases_);
  const auto async = strategy->async_summary();
  ASSERT_TRUE(async.has_value());
  EXPECT_EQ(async->updates, 2);  // one write per worker
  EXPECT_LE(async->staleness_max, 1) << "within a step only the other worker's update can land";
  EXPECT_EQ(async->mode, to_string(GetParam()));
}

TEST_P(HogwildStrategyTest, SyncEveryKeepsWorkersApartBetweenSyncs) {
  auto strategy = start(3);
  const Copies initial(strategy->trained_parameters());
  for (int step = 0; step < 2; ++step) {
    strategy->step(batch(step), phases_);
    // The workers train private copies: the shared parameters do not move before the sync.
    EXPECT_EQ(max_abs_difference(strategy->trained_parameters(), initial.tensors), 0.0) << "after step " << step + 1;
  }
  strategy->step(batch(2), phases_);
  EXPECT_GT(max_abs_difference(strategy->trained_parameters(), initial.tensors), 1e-4) << "the sync added nothing";
  const auto async = strategy->async_summary();
  ASSERT_TRUE(async.has_value());
  EXPECT_EQ(async->updates, 2) << "one write per worker per sync";
}

INSTANTIATE_TEST_SUITE_P(Mode, HogwildStrategyTest, ::testing::Values(HogwildMode::Threads, HogwildMode::Processes),
                         [](const auto& info) { return std::string(to_string(info.param)); });

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
TEST(HogwildStrategy, ProcessesModeStepsSentAheadTrainAsStepsSentOneByOne) {
  const auto& workload = WorkloadRegistry::instance().get("mlp");
  const DeviceSet devices = resolve_devices({"cpu", 1, 1});
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

TEST(HogwildStrategy, ProcessesModeOnCudaIsSkippedWithAReason) {
  StrategyOptions options;
  options.hogwild.mode = HogwildMode::Processes;
  options.hogwild.worker_executable = testing::ddpbench_executable();
  const auto strategy = StrategyRegistry::instance().get("hogwild").create();
  const CaseSpec spec{"mlp", "hogwild", 2, kBatch};
  const auto reason = strategy->unsupported_reason(spec, DeviceSet(DeviceKind::Cuda, 2, 1), options);
  ASSERT_TRUE(reason.has_value());
  EXPECT_NE(reason->find("CUDA IPC"), std::string::npos) << *reason;
  EXPECT_FALSE(strategy->unsupported_reason(spec, DeviceSet(DeviceKind::Cpu, 2, 1), options).has_value());
}

// ---- whole runs ----------------------------------------------------------------------------

std::vector<std::string> hogwild_run(const std::string& json_path, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--strategy", "hogwild"}, {"--steps", "3"}, {"--warmup", "1"},
                                {"--repetitions", "1"}, {"--workload", "mlp"}, {"--batch", "16"},
                                {"--dataset-size", "64"}, {"--timeout", "30"}},
                               json_path, std::move(extra));
}

// Objects in /dev/shm that a hogwild run could have made.
std::set<std::string> hogwild_shared_memory() {
  std::set<std::string> names;
  for (const auto& name : testing::directory_entries("/dev/shm")) {
    if (name.rfind("ddpbench-hogwild", 0) == 0) names.insert(name);
  }
  return names;
}

class HogwildRun : public ::testing::TestWithParam<std::string> {};

TEST_P(HogwildRun, LossFallsOnMlpAgainstSingleAtEqualSamples) {
  // 4 batches of random labels, 40 steps: the model memorises, so the loss must fall.
  ScratchDir dir;
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--strategy", "single,hogwild", "--hogwild-mode", GetParam(),
                                                              "--steps", "40", "--warmup", "0", "--parity-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& f = (*find_case(doc, "mlp/hogwild/world:2"))["ddpbench"];
  const auto& loss = f["loss_curve"]["loss"];
  ASSERT_EQ(loss.size(), 40u);
  EXPECT_LT(loss[39].get<double>(), 0.95 * loss[0].get<double>()) << loss.dump();
  EXPECT_EQ(f["loss_curve"]["samples_seen"][39], 40 * 16);
  EXPECT_EQ(f["async"]["mode"], GetParam());
  EXPECT_EQ(f["async"]["updates"], 80);
  // Threads: within a step only the other worker's update can land. Processes: the next step is
  // sent before this one's replies are in, so while a worker makes update k the other may still be
  // writing k-1 and go on to k+1: three.
  EXPECT_LE(f["async"]["staleness"]["max"].get<int>(), GetParam() == "processes" ? 3 : 1);
  EXPECT_EQ(f["parity"]["compared_by"], "loss");
  EXPECT_EQ(f["parity"]["dtype"], "fp32");  // as measured: compared by loss, so not in float64
  EXPECT_EQ(f["loss_vs_single"]["samples_seen"], 40 * 16);
  EXPECT_GT(f["loss_vs_single"]["ratio"].get<double>(), 0.0);
  if (GetParam() == "processes") {
    EXPECT_EQ(f["async"]["worker_peak_rss_bytes"].size(), 2u);
  }
  EXPECT_NE(r.out.find("loss "), std::string::npos) << "the table shows the loss against single";
}

TEST_P(HogwildRun, FourWorkersOnTwoDevicesShareTheUpdatesAndLowerTheLoss) {
  // --workers 4 over 2 virtual devices: each step is 4 updates (a quarter of the batch each), the
  // staleness an update can see is at most the 3 others of its step (processes mode: each other
  // worker's k-1, k and k+1, so 9), and the loss falls as with 2.
  ScratchDir dir;
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--strategy", "single,hogwild", "--hogwild-mode", GetParam(),
                                                              "--workers", "4", "--steps", "40", "--warmup", "0",
                                                              "--parity-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& f = (*find_case(doc, "mlp/hogwild/world:2"))["ddpbench"];
  ASSERT_EQ(f["status"], "ok") << f["reason"];
  EXPECT_EQ(f["async"]["workers"], 4);
  EXPECT_EQ(f["async"]["updates"], 160);
  EXPECT_LE(f["async"]["staleness"]["max"].get<int>(), GetParam() == "processes" ? 9 : 3);
  const auto& loss = f["loss_curve"]["loss"];
  ASSERT_EQ(loss.size(), 40u);
  EXPECT_LT(loss[39].get<double>(), 0.95 * loss[0].get<double>()) << loss.dump();
  EXPECT_EQ(f["loss_vs_single"]["samples_seen"], 40 * 16);
  if (GetParam() == "processes") {
    EXPECT_EQ(f["async"]["worker_peak_rss_bytes"].size(), 4u);
  }
}

TEST_P(HogwildRun, MoreWorkersThanSamplesIsSkippedWithTheReason) {
  ScratchDir dir;
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--hogwild-mode", GetParam(), "--workers", "6", "--batch",
                                                              "4", "--dataset-size", "8"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& f = (*find_case(doc, "mlp/hogwild/world:2"))["ddpbench"];
  EXPECT_EQ(f["status"], "skipped");
  EXPECT_NE(f["reason"].get<std::string>().find("a sample per worker: global batch 4 for 6 workers"), std::string::npos)
      << f["reason"];
}

TEST_P(HogwildRun, RunsEveryWorkloadWithSyncEvery) {
  ScratchDir dir;
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--workload", suite_workload_list(), "--hogwild-mode", GetParam(),
                                                              "--sync-every", "2", "--batch", "8", "--dataset-size", "32"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json doc = json::parse(read_text(dir.file("r.json")));
  int cases = 0;
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_type"] != "iteration") continue;
    ++cases;
    EXPECT_EQ(b["ddpbench"]["status"], "ok") << b["name"];
    EXPECT_EQ(b["ddpbench"]["async"]["sync_every"], 2);
    // Measured steps are each worker's 2nd to 4th: it syncs at the 2nd and the 4th.
    EXPECT_EQ(b["ddpbench"]["async"]["updates"], 4) << b["name"];
  }
  EXPECT_EQ(cases, 4);
}

INSTANTIATE_TEST_SUITE_P(Mode, HogwildRun, ::testing::Values("threads", "processes"),
                         [](const auto& info) { return info.param; });

TEST(HogwildThreadsRun, TraceHasEveryWorkersStepWithItsPhases) {
  ScratchDir dir;
  const auto r = run_process(hogwild_run("", {"--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trace = testing::read_trace(dir.file("ddpbench-rank0.json"));
  std::map<std::string, std::set<std::uint64_t>> threads_of;  // event name -> threads it ran on
  for (const auto& e : trace.events) threads_of[e["name"].get<std::string>()].insert(e["tid"].get<std::uint64_t>());
  // The main thread's step (data) and one step per worker thread, each with its phases.
  for (const char* phase : {"forward", "backward", "optimizer"}) EXPECT_EQ(threads_of[phase].size(), 2u) << phase;
  EXPECT_EQ(threads_of["step"].size(), 3u);
  EXPECT_EQ(threads_of["data"].size(), 1u);
}

TEST(HogwildProcessesRun, TraceHasEveryWorkerProcesssStepInsideTheParentsStep) {
  ScratchDir dir;
  const auto r = run_process(hogwild_run("", {"--trace", dir.path(), "--hogwild-mode", "processes"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trace = testing::read_trace(dir.file("ddpbench-rank0.json"));
  std::vector<json> parent_steps;
  std::map<std::string, std::vector<json>> worker_events;  // row name -> its events
  for (const auto& e : trace.events) {
    const auto row = trace.row_names.find(e["tid"].get<int>());
    if (row == trace.row_names.end()) {
      if (e["name"] == "step") parent_steps.push_back(e);
    } else {
      worker_events[row->second].push_back(e);
    }
  }
  ASSERT_EQ(parent_steps.size(), 3u);
  ASSERT_EQ(worker_events.size(), 2u) << "a row for each worker process";
  for (int w = 0; w < 2; ++w) {
    const auto& events = worker_events["hogwild worker " + std::to_string(w) + " process"];
    std::map<std::string, int> count;
    for (const auto& e : events) {
      ++count[e["name"].get<std::string>()];
      // Recorded in the worker process, on this process's timeline, under the step it belongs to:
      // ending inside it. The first measured step's update begins inside it too; every later one
      // was handed out during the step before (sent ahead), so it begins after that one began.
      const auto parent = std::find_if(parent_steps.begin(), parent_steps.end(),
                                       [&](const json& s) { return s["args"] == e["args"]; });
      ASSERT_NE(parent, parent_steps.end()) << e.dump();
      const json& sent_in = parent == parent_steps.begin() ? *parent : *(parent - 1);
      json span = *parent;
      span["dur"] = parent->at("ts").get<long>() + parent->at("dur").get<long>() - sent_in["ts"].get<long>();
      span["ts"] = sent_in["ts"];
      EXPECT_TRUE(testing::within(e, span)) << e.dump() << sent_in.dump() << parent->dump();
    }
    for (const char* name : {"step", "forward", "backward", "optimizer"}) EXPECT_EQ(count[name], 3) << name << " of worker " << w;
  }
}

TEST(HogwildProcessesRun, KilledWorkerFailsTheRunNamesItAndLeavesNothingBehind) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto shm_before = hogwild_shared_memory();
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--strategy", "single,hogwild", "--hogwild-mode", "processes"}),
                             0, {{"DDPBENCH_FAULT_WORKER", "1:kill"}, marker});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("hogwild worker 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  EXPECT_TRUE(testing::processes_with(testing::marker_text(marker)).empty()) << "a worker outlived the run";
  EXPECT_EQ(hogwild_shared_memory(), shm_before) << "shared memory left in /dev/shm";
  const json doc = json::parse(read_text(dir.file("r.json")));
  EXPECT_EQ((*find_case(doc, "mlp/single/world:1"))["ddpbench"]["status"], "ok");
  EXPECT_EQ((*find_case(doc, "mlp/hogwild/world:2"))["ddpbench"]["status"], "failed");
}

// A /dev/shm too small for the shared parameters (a container's is 64 MiB by default): one line
// naming it, the case failed and the run's other cases kept, never a worker or parent killed by
// SIGBUS at its first write into a page tmpfs could not back. The small /dev/shm is a 1 MiB tmpfs
// in a private mount namespace (unshare(1)), so the test needs root.
TEST(HogwildProcessesRun, ASmallDevShmIsOneLineAndAFailedCaseNotSigbus) {
  if (::geteuid() != 0) GTEST_SKIP() << "mounting a small /dev/shm in a private mount namespace needs root";
  if (::access("/usr/bin/unshare", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/unshare (util-linux)";
  ScratchDir dir;
  std::vector<std::string> args = {"/usr/bin/unshare", "--mount", "/bin/sh", "-c",
                                   "mount -t tmpfs -o size=1m tmpfs /dev/shm || exit 99; exec \"$@\"", "sh"};
  const auto run = hogwild_run(dir.file("r.json"), {"--strategy", "single,hogwild", "--hogwild-mode", "processes"});
  args.insert(args.end(), run.begin(), run.end());
  const auto r = run_process(args);
  if (r.exit_code == 99 || (r.exit_code != 0 && r.err.find("unshare:") != std::string::npos)) {
    GTEST_SKIP() << "no private mount namespace with a tmpfs here: " << r.err;
  }
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << ": " << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("/dev/shm cannot hold"), std::string::npos) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  EXPECT_EQ((*find_case(doc, "mlp/single/world:1"))["ddpbench"]["status"], "ok");
  const auto& hogwild = (*find_case(doc, "mlp/hogwild/world:2"))["ddpbench"];
  EXPECT_EQ(hogwild["status"], "failed");
  EXPECT_NE(hogwild["reason"].get<std::string>().find("--shm-size"), std::string::npos) << hogwild["reason"];
}

// Whether every process carrying `marker` is gone within 5 s. A run that ends at once (_Exit on a
// hang, or SIGKILL) leaves its workers to PR_SET_PDEATHSIG, which the kernel delivers as the parent
// dies but which takes a moment to tear a worker down.
bool processes_gone(const std::pair<std::string, std::string>& marker) {
  for (int i = 0; i < 50 && !testing::processes_with(testing::marker_text(marker)).empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return testing::processes_with(testing::marker_text(marker)).empty();
}

TEST(HogwildProcessesRun, HungWorkerEndsTheRunWithinTheTimeout) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--hogwild-mode", "processes", "--timeout", "3"}), 0,
                             {{"DDPBENCH_FAULT_WORKER", "0:hang"}, marker});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("mlp/hogwild/world:2"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 3 + 10) << "the run outlived its timeout by far";
  EXPECT_TRUE(processes_gone(marker)) << "a worker outlived the run";
}

TEST(HogwildProcessesRun, SigtermToTheParentEndsEveryWorker) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto shm_before = hogwild_shared_memory();
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--hogwild-mode", "processes", "--steps", "2000"}), 3000,
                             {marker}, SIGTERM, testing::kRunHasBegun);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_TRUE(testing::processes_with(testing::marker_text(marker)).empty()) << "a worker outlived the parent";
  EXPECT_EQ(hogwild_shared_memory(), shm_before);
}

TEST(HogwildProcessesRun, ASignalWhileWorkersStartEndsTheRunWithinTwoSeconds) {
  // Worker 1 never says it is ready: without the signal the parent would wait out --timeout.
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--hogwild-mode", "processes", "--timeout", "60"}),
                             /*kill_after_ms=*/3000, {{"DDPBENCH_FAULT_WORKER", "1:hang-start"}, marker}, SIGTERM,
                             testing::kRunHasBegun);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(r.seconds_after_signal, testing::kSecondsASignalEndsARunWithin);
  EXPECT_TRUE(processes_gone(marker)) << "a worker outlived the run";
}

TEST(HogwildProcessesRun, SigkillToTheParentTakesTheWorkersWithIt) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto shm_before = hogwild_shared_memory();
  run_process(hogwild_run(dir.file("r.json"), {"--hogwild-mode", "processes", "--steps", "2000"}), 3000, {marker}, SIGKILL);
  EXPECT_TRUE(processes_gone(marker)) << "a worker outlived a killed parent";
  EXPECT_EQ(hogwild_shared_memory(), shm_before);
}

}  // namespace
}  // namespace hogwild_test
}  // namespace ddpbench
