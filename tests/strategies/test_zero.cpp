// zero1 and zero2: whole runs of real rank processes. Parity with single in float64 at world 2 to 4
// (buckets that need padding at 3), bytes sent per rank equal to ddp's within the padding (ZeRO's
// promise: stages 1 and 2 cost no more traffic than DDP), the exposed reduce-scatter and all-gather
// as phases, and the flags that do not apply. (A killed or hung rank: test_strategies.cpp, for every
// strategy whose ranks are processes.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::find_case;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;

std::vector<std::string> zero_run(const std::string& json_path, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "3"}, {"--warmup", "1"}, {"--repetitions", "1"},
                                {"--workload", "mlp"}, {"--batch", "12"}, {"--dataset-size", "48"}, {"--timeout", "30"}},
                               json_path, std::move(extra));
}

class ZeroParity : public ::testing::TestWithParam<int> {};

TEST_P(ZeroParity, BothStagesMatchSingleInFloat64) {
  const int world = GetParam();
  ScratchDir dir;
  const auto r = run_process(zero_run(dir.file("r.json"), {"--strategy", "zero1,zero2", "--world-size",
                                                           std::to_string(world), "--parity-steps", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  for (const std::string strategy : {"zero1", "zero2"}) {
    SCOPED_TRACE(strategy);
    const auto* c = find_case(doc, "mlp/" + strategy + "/world:" + std::to_string(world));
    ASSERT_NE(c, nullptr);
    const auto& p = (*c)["ddpbench"]["parity"];
    EXPECT_EQ(p["dtype"], "fp64");  // the ranks trained, reduce-scattered and all-gathered in float64 too
    EXPECT_LE(p["max_rel_param_diff"].get<double>(), 1e-9);
    EXPECT_TRUE(p["within_tolerance"].get<bool>());
    EXPECT_EQ((*c)["ddpbench"]["ranks"].size(), static_cast<std::size_t>(world));
  }
}

INSTANTIATE_TEST_SUITE_P(World, ZeroParity, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(ZeroRun, SendsWhatDdpSendsWithinThePaddingAndShowsTheExposedCollectivesAsPhases) {
  ScratchDir dir;
  const int world = 3;  // mlp's buckets do not split into 3: padding
  const auto r = run_process(zero_run(dir.file("r.json"), {"--strategy", "ddp,zero1,zero2", "--world-size",
                                                           std::to_string(world), "--parity-steps", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& ddp = (*find_case(doc, "mlp/ddp/world:3"))["ddpbench"]["comm"];
  const double ddp_sent = ddp["bytes_sent_per_step"].get<double>();
  const double param_bytes = ddp["bytes_per_step"].get<double>();  // ddp all-reduces every gradient once
  ASSERT_GT(ddp_sent, 0);
  EXPECT_NEAR(ddp_sent / (2.0 * (world - 1) / world * param_bytes), 1.0, 1e-12);  // the ring all-reduce's cost
  for (const std::string strategy : {"zero1", "zero2"}) {
    SCOPED_TRACE(strategy);
    const auto& d = (*find_case(doc, "mlp/" + strategy + "/world:3"))["ddpbench"];
    const auto& comm = d["comm"];
    const double rs = comm["reduce_scatter_bytes_per_step"].get<double>();
    const double ag = comm["all_gather_bytes_per_step"].get<double>();
    const int buckets = comm["buckets"].get<int>();
    // Every gradient reduce-scattered once and every parameter gathered once, padded to the world.
    EXPECT_EQ(rs, ag);
    EXPECT_GE(rs, param_bytes - 4);  // ddp's payload holds the loss too
    EXPECT_LE(rs, param_bytes + buckets * (world - 1) * 4);
    const double ratio = comm["bytes_sent_per_step"].get<double>() / ddp_sent;
    EXPECT_NEAR(ratio, 1.0, 1e-4) << "ZeRO stages 1 and 2 send what DDP sends";
    EXPECT_GT(comm["reduce_scatter_ms"].get<double>(), 0);
    EXPECT_GT(comm["all_gather_ms"].get<double>(), 0);
    EXPECT_EQ(comm["backend"], "gloo");
    const auto& phases = d["phases_ms"];
    EXPECT_TRUE(phases.contains("reduce_scatter_exposed")) << phases.dump();
    EXPECT_TRUE(phases.contains("all_gather_exposed")) << phases.dump();
    EXPECT_FALSE(phases.contains("comm_exposed")) << "no all-reduce of gradients here";
  }
}

// mlp's sizes are known: 2,913,290 float32 parameters, and SGD with momentum keeps one buffer of
// them. SHARDED.md's table, per rank at world N: ddp holds parameters, gradients and optimizer state
// whole; zero1 the optimizer state's 1/N; zero2 the gradients' 1/N too. Padding adds at most N-1
// elements a bucket.
TEST(ZeroMemory, EachRankHoldsWhatZerosTableSaysAndThePeakHoldsThatPlusTheRest) {
  constexpr std::int64_t kParamBytes = 2913290LL * 4;
  for (const int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ScratchDir dir;
    const auto r = run_process(zero_run(dir.file("r.json"), {"--strategy", "ddp,zero1,zero2", "--world-size",
                                                             std::to_string(world), "--parity-steps", "0"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json doc = json::parse(read_text(dir.file("r.json")));
    struct Expected {
      std::string strategy;
      double gradients, optimizer;  // fractions of the parameters' bytes
    };
    const double n = world;
    for (const auto& e : {Expected{"ddp", 1, 1}, Expected{"zero1", 1, 1 / n}, Expected{"zero2", 1 / n, 1 / n}}) {
      SCOPED_TRACE(e.strategy);
      const auto& d = (*find_case(doc, "mlp/" + e.strategy + "/world:" + std::to_string(world)))["ddpbench"];
      const std::int64_t padding = e.strategy == "ddp" ? 0 : d["comm"]["buckets"].get<std::int64_t>() * (world - 1) * 4;
      ASSERT_EQ(d["memory"].size(), static_cast<std::size_t>(world));
      for (const auto& m : d["memory"]) {
        const auto params = m["parameter_bytes"].get<std::int64_t>();
        const auto grads = m["gradient_bytes"].get<std::int64_t>();
        const auto optim = m["optimizer_state_bytes"].get<std::int64_t>();
        EXPECT_GE(params, kParamBytes);
        EXPECT_LE(params, kParamBytes + padding);
        EXPECT_GE(grads, static_cast<std::int64_t>(e.gradients * kParamBytes) - 4);
        EXPECT_LE(grads, static_cast<std::int64_t>(e.gradients * (kParamBytes + padding)) + 4);
        // The optimizer steps each parameter's part of the chunks, so it keeps no state for padding.
        EXPECT_GE(optim, static_cast<std::int64_t>(e.optimizer * kParamBytes) - 4 - padding);
        EXPECT_LE(optim, static_cast<std::int64_t>(e.optimizer * (kParamBytes + padding)) + 4);
        // The peak holds them, and activations and buffers besides.
        EXPECT_GT(m["other_bytes"].get<std::int64_t>(), 0);
        EXPECT_EQ(m["peak_allocated_bytes"].get<std::int64_t>(), params + grads + optim + m["other_bytes"].get<std::int64_t>());
      }
    }
  }
}

// --grad-accum 4: the buckets reduce-scatter after the last micro-batch only (no_sync on the others),
// one step's traffic; --sync-every-microbatch reduce-scatters after each, adding into the chunks the
// rounds before left: four times the reduce-scatters, the one all-gather a step as before. All match
// single in float64 on the whole batch. With the rounds' chunks replaced instead of added, parity
// failed (2026-11-28).
TEST(ZeroRun, AccumulatesWithOneReduceScatterAStepOrOneAMicroBatch) {
  ScratchDir dir;
  std::map<std::string, json> runs;
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"plain", {}}, {"no_sync", {"--grad-accum", "4"}}, {"every", {"--grad-accum", "4", "--sync-every-microbatch"}}}) {
    std::vector<std::string> args = {"--strategy", "zero1,zero2", "--batch", "16", "--parity-steps", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_process(zero_run(dir.file(name + ".json"), args));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    runs[name] = json::parse(read_text(dir.file(name + ".json")));
  }
  for (const std::string strategy : {"zero1", "zero2"}) {
    SCOPED_TRACE(strategy);
    const auto d = [&](const std::string& name) { return (*find_case(runs[name], "mlp/" + strategy + "/world:2"))["ddpbench"]; };
    for (const std::string name : {"plain", "no_sync", "every"}) {
      ASSERT_EQ(d(name)["status"], "ok") << name << ": " << d(name)["reason"];
      EXPECT_LE(d(name)["parity"]["max_rel_param_diff"].get<double>(), 1e-9) << name;
    }
    const auto scattered = [&](const std::string& name) { return d(name)["comm"]["reduce_scatter_bytes_per_step"].get<std::int64_t>(); };
    const auto gathered = [&](const std::string& name) { return d(name)["comm"]["all_gather_bytes_per_step"].get<std::int64_t>(); };
    EXPECT_EQ(scattered("no_sync"), scattered("plain"));
    EXPECT_EQ(scattered("every"), 4 * scattered("plain"));
    EXPECT_EQ(gathered("every"), gathered("plain"));
  }
}

TEST(ZeroRun, NoOverlapGivesTheSameWeightsAndMoreExposedReduceScatter) {
  ScratchDir dir;
  const auto r = run_process(zero_run(dir.file("r.json"), {"--strategy", "zero2", "--no-overlap", "--bucket-mb", "1",
                                                           "--parity-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& d = (*find_case(doc, "mlp/zero2/world:2"))["ddpbench"];
  EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>());
  EXPECT_GT(d["comm"]["buckets"].get<int>(), 3);  // --bucket-mb took effect
  // Nothing overlapped: every reduce-scatter is waited for after backward.
  EXPECT_GT(d["phases_ms"]["reduce_scatter_exposed"].get<double>(), 0.5 * d["comm"]["reduce_scatter_ms"].get<double>());
}

// Every bucket's reduce-scatter and all-gather is an async range inside the step it belongs to, on
// every rank's timeline, beside the exposed waits as phases.
TEST(ZeroRun, TraceShowsEachBucketsReduceScatterAndAllGatherInsideItsStep) {
  ScratchDir dir;
  const auto r = run_process(zero_run(dir.file("r.json"), {"--strategy", "zero2", "--bucket-mb", "1", "--parity-steps", "0",
                                                           "--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto trace = testing::read_trace(dir.file("ddpbench-rank" + std::to_string(rank) + ".json"));
    const std::string name = "mlp/zero2/world:2";
    const auto steps = trace.events_of(name, "step");
    ASSERT_EQ(steps.size(), 3u);
    for (const char* collective : {"reduce_scatter", "all_gather"}) {
      const auto ranges = trace.events_of(name, collective);
      EXPECT_GE(ranges.size(), 3u * 4u) << collective << ": more than three buckets a step at 1 MiB";
      for (const auto& a : ranges) {
        EXPECT_TRUE(a.value("async", false)) << a.dump();
        EXPECT_TRUE(std::any_of(steps.begin(), steps.end(),
                                [&](const json& s) { return s["args"] == a["args"] && testing::within(a, s); }))
            << a.dump();
      }
    }
    EXPECT_EQ(trace.events_of(name, "reduce_scatter_exposed").size(), steps.size());
    EXPECT_EQ(trace.events_of(name, "all_gather_exposed").size(), steps.size());
  }
}

TEST(ZeroCli, FlagsOfOtherStrategiesAreBadInputNamingTheFlag) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--strategy", "zero1", "--grad-as-bucket-view"},
        std::vector<std::string>{"--strategy", "zero2", "--checkpoint", "/tmp/never-written.pt"},
        std::vector<std::string>{"--strategy", "zero1,zero2", "--hogwild-mode", "processes"}}) {
    const auto r = run_process(zero_run("", args));
    EXPECT_EQ(r.exit_code, 2) << args[2];
    EXPECT_NE(r.err.find(args[2]), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
  // The bucket flags apply to them, and say so when nothing they apply to runs.
  const auto none = run_process(zero_run("", {"--strategy", "single", "--bucket-mb", "4"}));
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("--bucket-mb: applies to ddp, zero1 and zero2 only"), std::string::npos) << none.err;
}

}  // namespace
}  // namespace ddpbench
