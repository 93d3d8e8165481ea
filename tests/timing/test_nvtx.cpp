// NVTX ranges as a profiler sees them, per strategy, through the injection library above.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>

#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using testing::ddpbench_args;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;

struct Ranges {
  std::set<std::string> outer;                 // names pushed with nothing open on that thread
  std::set<std::string> inside_step;           // names pushed directly inside a "step" range
  std::set<std::string> domains;
  std::set<std::string> async;                 // names of start/end ranges (collectives in flight)
  int async_ranges = 0;
  int pushes = 0;
  std::vector<std::string> problems;
};

[[maybe_unused]] Ranges parse(const std::string& log) {  // unused where NVTX is absent (tests skip)
  Ranges r;
  std::map<std::string, std::vector<std::string>> stacks;  // per thread
  std::istringstream in(log);
  std::string op, domain, thread, name;
  std::map<std::string, std::string> open_async;  // id -> name
  // A name is the rest of its line: pp's carry their micro-batch and stage after the phase.
  const auto read_name = [&in, &name] {
    std::getline(in >> std::ws, name);
  };
  while (in >> op >> domain >> thread) {
    r.domains.insert(domain);
    auto& stack = stacks[thread];
    if (op == "start") {
      std::string id;
      in >> id;
      read_name();
      open_async[id] = name;
      r.async.insert(name);
      ++r.async_ranges;
    } else if (op == "end") {
      std::string id;
      in >> id;
      if (open_async.erase(id) == 0) r.problems.push_back("end of a range never started: " + id);
    } else if (op == "push") {
      read_name();
      ++r.pushes;
      (stack.empty() ? r.outer : stack.back() == "step" ? r.inside_step : r.outer).insert(name);
      if (!stack.empty() && stack.back() != "step") r.problems.push_back(name + " nested in " + stack.back());
      stack.push_back(name);
    } else if (stack.empty()) {
      r.problems.push_back("pop without push on thread " + thread);
    } else {
      stack.pop_back();
    }
  }
  for (const auto& [thread, stack] : stacks) {
    if (!stack.empty()) r.problems.push_back(std::to_string(stack.size()) + " ranges left open");
  }
  for (const auto& [id, name] : open_async) r.problems.push_back(name + " " + id + " never ended");
  return r;
}

struct Expectation {
  std::string strategy;
  std::set<std::string> phases;
  std::set<std::string> async = {};  // start/end ranges expected besides
};

class NvtxRanges : public ::testing::TestWithParam<Expectation> {};

TEST_P(NvtxRanges, EveryStepHoldsItsNamedPhases) {
#ifndef DDPBENCH_NVTX_RECORDER
  GTEST_SKIP() << "built without the NVTX headers: the ranges compile to nothing";
#else
  ScratchDir dir;
  const std::string log = dir.file("nvtx.log");
  const auto r = run_process(ddpbench_args({"--device", "cpu", "--threads", "1", "--strategy", GetParam().strategy,
                                            "--steps", "2", "--warmup", "1", "--repetitions", "1", "--batch", "8",
                                            "--dataset-size", "16", "--no-json"}),
                             0, {{"NVTX_INJECTION64_PATH", DDPBENCH_NVTX_RECORDER}, {"DDPBENCH_NVTX_LOG", log}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const Ranges ranges = parse(read_text(log));
  EXPECT_TRUE(ranges.problems.empty()) << ranges.problems.front();
  EXPECT_EQ(ranges.domains, std::set<std::string>{"ddpbench"});
  // Only steps stand alone; every phase is inside one.
  EXPECT_EQ(ranges.outer, std::set<std::string>{"step"});
  EXPECT_EQ(ranges.inside_step, GetParam().phases);
  EXPECT_EQ(ranges.async, GetParam().async);
  // parity (3 steps + reference) + warm-up 1 + measured 2: at least 6 steps recorded.
  EXPECT_GE(ranges.pushes, 6);
#endif
}

// pp at its default world (2) and batch 8: 4 micro-batches; each forward and backward is named
// for its micro-batch and stage, so the profile shows the schedule. The plain "forward" and
// "backward" are the parity pass's reference, `single`, run by the launcher.
std::set<std::string> pp_ranges() {
  std::set<std::string> out = {"data", "forward", "backward", "pipeline_wait", "optimizer"};
  for (int mb = 0; mb < 4; ++mb) {
    for (int stage = 0; stage < 2; ++stage) {
      for (const char* phase : {"forward", "backward"}) {
        out.insert(std::string(phase) + " mb" + std::to_string(mb) + " stage" + std::to_string(stage));
      }
    }
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    PerStrategy, NvtxRanges,
    ::testing::Values(Expectation{"single", {"data", "forward", "backward", "optimizer"}},
                      Expectation{"dp", {"data", "replicate", "scatter", "forward", "gather_loss", "backward", "reduce",
                                         "optimizer"}},
                      Expectation{"dp-loss-in-model", {"data", "replicate", "scatter", "forward", "gather_loss",
                                                       "backward", "reduce", "optimizer"}},
                      // Each worker thread has its own step range with its phases; the main
                      // thread's step holds the data phase.
                      Expectation{"hogwild", {"data", "forward", "backward", "optimizer"}},
                      // Ranks' ranges (from every rank process), and one allreduce range per bucket
                      // from launch during backward to completion on Gloo's thread.
                      Expectation{"ddp", {"data", "forward", "backward", "comm_exposed", "reduce", "optimizer"},
                                  {"allreduce"}},
                      Expectation{"pp", pp_ranges()}),
    [](const auto& info) {
      std::string n = info.param.strategy;
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

}  // namespace
}  // namespace ddpbench
