// hogwild, whole runs of the ddpbench executable in both modes: the loss falls against single at
// equal samples, every workload runs, the trace holds every worker's ranges, and a killed, hung or
// interrupted run leaves no process and no shared memory behind. The worker and the strategy on
// their own are in test_hogwild.cpp.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tests/support/test_support.h"

namespace ddpbench {
// Named, so that its file-local helpers stay apart from another test file's in a unity build.
namespace hogwild_runs_test {
namespace {

using nlohmann::json;
using testing::find_case;
using testing::read_text;
using testing::suite_workload_list;
using testing::run_process;
using testing::ScratchDir;

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

TEST_P(HogwildRun, GptAtItsGivenSizeTrainsCheckpointedAndAccumulatingInEveryWorker) {
  // The workers build the parent's model: gpt2 at --gpt2-size and --seq-len (worker processes had
  // built GPT-2 small and failed to match), each block checkpointed and each update two
  // micro-batches (processes mode: both in the control block).
  ScratchDir dir;
  const auto r = run_process(hogwild_run(dir.file("r.json"), {"--workload", "gpt2", "--gpt2-size", "2:4:64:512", "--seq-len", "8",
                                                              "--hogwild-mode", GetParam(), "--batch", "8",
                                                              "--dataset-size", "32", "--activation-checkpointing", "full",
                                                              "--grad-accum", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const json* c = find_case(doc, "gpt2/hogwild/world:2");
  ASSERT_NE(c, nullptr);
  EXPECT_EQ((*c)["ddpbench"]["status"], "ok") << (*c)["ddpbench"]["reason"];
  const auto& levers = doc["context"]["ddpbench"]["settings"]["strategy_settings"]["levers"];
  EXPECT_EQ(levers["activation_checkpointing"], "full");
  EXPECT_EQ(levers["grad_accum"], 2);
  EXPECT_TRUE(std::isfinite((*c)["ddpbench"]["final_loss"].get<double>()));
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
}  // namespace hogwild_runs_test
}  // namespace ddpbench
