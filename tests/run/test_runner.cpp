// The runner end to end: noisy and degenerate cases, out of memory, the --timeout watchdog, and
// signals in every phase, each ending with what was measured kept in the JSON.
#include <gtest/gtest.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "base/errors.h"
#include "run/parity.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::find_case;
using testing::path_exists;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;
using testing::tiny_run;
using testing::ddpbench_args;
using testing::start_long_run;
using testing::start_process;

TEST(Runner, MaxCvMarksNoisyCasesInTableAndJson) {
  // Real timings always vary a little: with --max-cv 0 every case is noisy, with 10 (1000%) none is.
  for (const auto& [max_cv, noisy] : std::vector<std::pair<std::string, bool>>{{"0", true}, {"10", false}}) {
    ScratchDir dir;
    const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--max-cv", max_cv}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("* noisy: repetitions vary more than --max-cv") != std::string::npos, noisy) << r.out;
    const json doc = json::parse(read_text(dir.file("r.json")));
    for (const auto& b : doc["benchmarks"]) EXPECT_EQ(b["ddpbench"]["noisy"].get<bool>(), noisy) << b["name"];
  }
}

TEST(Runner, WorldSizeOneRunsAndSaysItDegenerates) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "dp", "--world-size", "1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mlp/dp/world:1: world size 1: dp degenerates to one device"), std::string::npos) << r.out;
  const json doc = json::parse(read_text(dir.file("r.json")));
  EXPECT_EQ(doc["benchmarks"][0]["ddpbench"]["status"], "ok");
  EXPECT_NE(doc["benchmarks"][0]["ddpbench"]["note"].get<std::string>().find("degenerates"), std::string::npos);
}

TEST(Runner, OutOfMemoryIsItsOwnStatusAndTheRunGoesOn) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  // A dataset of 10^11 samples: no machine has the memory, and LibTorch's CPU allocator says
  // "can't allocate memory", not "out of memory".
  const auto r = run_process(tiny_run(path, {"--strategy", "single,dp", "--dataset-size", "100000000000"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const json doc = json::parse(read_text(path));
  int oom = 0;
  for (const auto& b : doc["benchmarks"]) {
    EXPECT_EQ(b["ddpbench"]["status"], "oom") << b["run_name"];
    EXPECT_NE(b["ddpbench"]["reason"].get<std::string>().find("can't allocate memory"), std::string::npos);
    ++oom;
  }
  EXPECT_EQ(oom, 2) << "the case after the first out-of-memory case was not tried";
  EXPECT_NE(r.err.find("ddpbench: error: mlp/dp/world:2 oom: "), std::string::npos) << r.err;
}

TEST(Runner, AHungStepEndsTheRunWithinTheTimeoutKeepingWhatWasMeasured) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  // DDPBENCH_FAULT_HANG makes the first measured step of that case hang (fault injection).
  const auto r = run_process(tiny_run(path, {"--strategy", "single,dp,dp-loss-in-model", "--timeout", "2"}),
                             /*kill_after_ms=*/60000, {{"DDPBENCH_FAULT_HANG", "mlp/dp/world:2"}});
  ASSERT_EQ(r.signal, 0) << "still running after 60 s: the watchdog did not end it";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("mlp/dp/world:2: timed out: no step finished within 2 s (--timeout)"), std::string::npos) << r.err;
  const json doc = json::parse(read_text(path));
  EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
  bool single_kept = false, dp_failed = false, never_reached = false;
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_name"] == "mlp/single/world:1" && b["run_type"] == "iteration") single_kept = true;
    if (b["run_name"] == "mlp/dp/world:2") {
      dp_failed = b["ddpbench"]["status"] == "failed" && b["error_occurred"] == true &&
                  b["ddpbench"]["reason"].get<std::string>().find("timed out") != std::string::npos;
    }
    // The case after the hung one never ran: it says so, rather than "ok" with nothing behind it.
    if (b["run_name"] == "mlp/dp-loss-in-model/world:2") {
      never_reached = b["ddpbench"]["status"] == "not_run" && b["error_occurred"] == true &&
                      b["ddpbench"]["reason"] == "not run: the --timeout watchdog stopped the run first";
    }
  }
  EXPECT_TRUE(single_kept) << "the repetition measured before the hang is lost";
  EXPECT_TRUE(dp_failed);
  EXPECT_TRUE(never_reached);
  EXPECT_NE(r.out.find("mlp/dp-loss-in-model/world:2  not_run"), std::string::npos) << r.out;
}

// SIGINT or SIGTERM ends a run within 2 s in whatever phase it is, with the 130 of an interrupt.
// (The rendezvous and worker start-up phases are tested with ddp and hogwild.)
TEST(Runner, SignalsDuringTheParityCheckEndTheRunWithinTwoSeconds) {
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(signal));
    ScratchDir dir;
    const auto path = dir.file("r.json");
    // 10000 parity steps of wide-logits: minutes, so the signal lands in the parity check.
    const auto r = run_process(tiny_run(path, {"--workload", "wide-logits", "--strategy", "single,dp", "--parity-steps",
                                               "10000"}),
                               /*kill_after_ms=*/2000, {}, signal, testing::kRunHasBegun);
    EXPECT_EQ(r.exit_code, 130) << r.err;
    EXPECT_LT(r.seconds_after_signal, testing::kSecondsASignalEndsARunWithin);
    const json doc = json::parse(read_text(path));
    EXPECT_TRUE(doc["context"]["ddpbench"].contains("interruption"));
    for (const auto& b : doc["benchmarks"]) {
      EXPECT_EQ(b["ddpbench"]["status"], "not_run") << b["run_name"];
      EXPECT_EQ(b["ddpbench"]["reason"], "not run: the run was interrupted first");
    }
  }
}

TEST(Runner, SignalsDuringMeasurementEndTheRunWithinTwoSeconds) {
  // SIGHUP too: a closed terminal or ssh session stops the run as Ctrl-C does, keeping what it measured.
  for (int signal : {SIGTERM, SIGHUP}) {
    SCOPED_TRACE(strsignal(signal));
    ScratchDir dir;
    const auto path = dir.file("r.json");
    const auto r = run_process(tiny_run(path, {"--strategy", "single,dp", "--steps", "1000000", "--parity-steps", "0"}),
                               /*kill_after_ms=*/2000, {}, signal, testing::kRunHasBegun);
    EXPECT_EQ(r.exit_code, 130) << r.err;
    EXPECT_LT(r.seconds_after_signal, testing::kSecondsASignalEndsARunWithin);
    const json doc = json::parse(read_text(path));
    EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
    EXPECT_EQ(doc["context"]["ddpbench"]["interruption"], "interrupted by a signal; measured repetitions are kept");
  }
}

// A run killed outright (SIGKILL here; SIGBUS or a lost machine alike) cannot write a last file: the
// one it wrote last must already say that the run had not finished, and call no case ok that has
// nothing measured behind it.
TEST(Runner, TheFileOfAKilledRunSaysItDidNotFinishAndNoUnmeasuredCaseIsOk) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  const pid_t pid = start_process(ddpbench_args({"--device", "cpu", "--threads", "1", "--strategy", "single,dp",
                                                 "--world-size", "2", "--workload", "mlp", "--steps", "20",
                                                 "--repetitions", "100", "--batch", "16", "--json", path}));
  auto measured_entries = [](const json& doc) {
    int n = 0;
    for (const auto& b : doc["benchmarks"]) n += b["run_type"] == "iteration" && !b.contains("error_occurred");
    return n;
  };
  for (int i = 0; i < 1500; ++i) {  // until the first repetition is in the file (written whole, by rename)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (path_exists(path) && measured_entries(json::parse(read_text(path))) > 0) break;
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  const json doc = json::parse(read_text(path));
  const auto& run = doc["context"]["ddpbench"];
  EXPECT_FALSE(run["complete"].get<bool>());
  ASSERT_TRUE(run.contains("interruption"));
  EXPECT_NE(run["interruption"].get<std::string>().find("had not finished"), std::string::npos) << run["interruption"];
  std::map<std::string, int> measured;
  std::map<std::string, std::string> status;
  for (const auto& b : doc["benchmarks"]) {
    const std::string name = b["run_name"];
    measured[name] += b["run_type"] == "iteration" && !b.contains("error_occurred");
    status[name] = b["ddpbench"]["status"];
  }
  ASSERT_EQ(status.size(), 2u);
  EXPECT_GE(measured["mlp/single/world:1"], 1) << "the measured repetition is lost";
  for (const auto& [name, s] : status) {
    if (s == "ok") {
      EXPECT_GE(measured[name], 1) << name << " says ok with nothing measured";
    } else {
      EXPECT_EQ(s, "not_run") << name;
    }
  }
}

// DDPBENCH_FAULT_HANG's step never returns and never looks at the stop request, as a step stuck in
// a library does (OpenBLAS retrying an allocation under ulimit -v): SIGINT still ends the run
// within 2 s, exit 130, with what was measured in the JSON and the stuck case not_run.
TEST(Runner, AStopTheStuckStepCannotReachEndsTheRunWithinTwoSeconds) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  const auto r = run_process(tiny_run(path, {"--strategy", "single,dp", "--timeout", "120"}),
                             /*kill_after_ms=*/300, {{"DDPBENCH_FAULT_HANG", "mlp/dp/world:2"}}, SIGINT,
                             "injected fault: mlp/dp/world:2 hangs now");
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(r.seconds_after_signal, testing::kSecondsASignalEndsARunWithin);
  const json doc = json::parse(read_text(path));
  EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
  EXPECT_NE(doc["context"]["ddpbench"]["interruption"].get<std::string>().find("did not end within 1500 ms"),
            std::string::npos) << doc["context"]["ddpbench"]["interruption"];
  EXPECT_EQ((*find_case(doc, "mlp/single/world:1"))["ddpbench"]["status"], "ok");
  EXPECT_EQ((*find_case(doc, "mlp/dp/world:2"))["ddpbench"]["status"], "not_run");
  EXPECT_NE(r.out.find("mlp/single/world:1"), std::string::npos) << "no table: " << r.out;
}

// Under an address-space limit too small for LibTorch and its BLAS (ulimit -v, in a child shell),
// the run ends within --timeout: where it fails, the case is oom with the figures and the line says
// so (or, seen now and then, an abort in bad_alloc; on 2.6 with one thread the run may fit), never a
// step that never ends, nor a hang nobody can explain. Twenty runs, as the hang it guards against
// came in some runs only: with 64 intra-op threads LibTorch's thread pool cannot start them all and
// at::set_num_threads never returns (before the watchdog covered set-up, every such run hung); with
// one, a step's allocation fails inside OpenBLAS, which retries it for ever. The limit, 900,000 KiB,
// lies between what the libraries need to load (below about 800,000 KiB, 1.13's OpenBLAS retries an
// allocation for ever in its load-time init, before main: no watchdog of ours can run there) and
// what a run needs (2.6 trains mlp with one thread within 1,000,000 KiB, and at times within 900,000).
TEST(Runner, AnAddressSpaceLimitTooSmallNeverHangsARunAndAnOomSaysSoInOneLine) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of shadow address space: no ulimit -v lets it start";
#endif
  {
    // The CUDA wheel's libraries (cuSPARSE, cuBLAS, ...) do not even map within the limit (seen on
    // the H200, 2026-11-27: "libcusparse.so.12: failed to map segment"): no run reaches main there,
    // so there is no oom path to test, and the test says so rather than failing on the loader.
    const auto loads = run_process({"/bin/sh", "-c", "ulimit -v 900000 && exec \"$@\" --version", "sh", testing::ddpbench_executable()});
    if (loads.exit_code == 127 && loads.err.find("error while loading shared libraries") != std::string::npos) {
      GTEST_SKIP() << "this build's libraries need more than 900,000 KiB of address space to load: "
                   << first_line(loads.err);
    }
  }
  int oom_runs = 0;
  for (int i = 0; i < 20; ++i) {
    const std::string threads = i % 2 == 0 ? "64" : "1";
    SCOPED_TRACE("run " + std::to_string(i) + ", --threads " + threads);
    ScratchDir dir;
    const auto path = dir.file("r.json");
    std::vector<std::string> args = {"/bin/sh", "-c", "ulimit -v 900000 && exec \"$@\"", "sh"};
    const auto run = tiny_run(path, {"--strategy", "single", "--timeout", "1", "--threads", threads});
    args.insert(args.end(), run.begin(), run.end());
    const auto r = run_process(args, /*kill_after_ms=*/30000);
    ASSERT_NE(r.signal, SIGKILL) << "still running after 30 s: a hang: " << r.err;
    if (r.signal == SIGABRT && r.err.find("std::bad_alloc") != std::string::npos) {
      // Seen once in a CI run (1.13, --threads 1, a loaded machine): an allocation failed where no
      // handler of ours can catch it and the process aborted. Not a hang, which is what this test
      // guards; the abort is open in issue 43. Said, not hidden.
      std::printf("run %d ended in an uncaught std::bad_alloc (abort), not in one line\n", i);
      continue;
    }
    ASSERT_EQ(r.signal, 0) << r.err;
    if (r.exit_code == 0 && threads == "1") {
      // 2.6 with one thread lies at the limit: in a fresh trixie root (CI) 1 run of 10 fit within
      // it; in the development VM's, every one. Not a hang either. The oom status itself is
      // Runner.OutOfMemoryIsItsOwnStatusAndTheRunGoesOn's.
      const json doc = json::parse(read_text(path));
      EXPECT_EQ((*find_case(doc, "mlp/single/world:1"))["ddpbench"]["status"], "ok") << doc.dump(1);
      std::printf("run %d fit within the limit (--threads 1) and ended ok\n", i);
      continue;
    }
    EXPECT_EQ(r.exit_code, 1) << r.err;
    ++oom_runs;
    // One error line (64 threads on this machine's cores also draws the oversubscription warning).
    std::size_t errors = 0;
    for (std::size_t at = r.err.find("ddpbench: error:"); at != std::string::npos; at = r.err.find("ddpbench: error:", at + 1)) ++errors;
    EXPECT_EQ(errors, 1u) << r.err;
    EXPECT_NE(r.err.find("oom"), std::string::npos) << r.err;
    const json doc = json::parse(read_text(path));
    EXPECT_EQ((*find_case(doc, "mlp/single/world:1"))["ddpbench"]["status"], "oom") << doc.dump(1);
  }
  std::printf("%d of 20 runs ended oom in one line\n", oom_runs);
}

TEST(Runner, InterruptKeepsMeasuredRepetitions) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  const pid_t pid = start_long_run(path);
  // Wait until some repetitions are in the file, then interrupt.
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (path_exists(path) && read_text(path).find("\"iteration\"") != std::string::npos) break;
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const json doc = json::parse(read_text(path));
  EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
  EXPECT_TRUE(doc["context"]["ddpbench"].contains("interruption"));
  int iterations = 0;
  for (const auto& b : doc["benchmarks"]) iterations += b["run_type"] == "iteration";
  EXPECT_GE(iterations, 1);
}

// Issue 43 item 11: the failure's figures keep their digits, a tolerance of 1e-9 included.
TEST(Parity, AFailureSaysItsDifferenceAndToleranceInSignificantDigits) {
  CaseRecord record;
  record.spec = CaseSpec{"mlp", "ddp", 2, 16};
  ParityRecord parity;
  parity.steps = 3;
  parity.tolerance = 1e-9;
  parity.max_rel_param_diff = 3.5e-7;
  parity.within_tolerance = false;
  judge_parity(record, parity, /*sync_bn=*/false);
  EXPECT_EQ(record.status, CaseStatus::Failed);
  EXPECT_EQ(record.reason, "parity: parameters differ from single by 3.5e-07 (relative) after 3 steps, tolerance 1e-09");
}

}  // namespace
}  // namespace ddpbench
