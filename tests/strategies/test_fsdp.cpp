// fsdp: whole runs of real rank processes. Parity with single in float64 at world 2 to 4 (units that
// need padding at 3), with and without resharding after forward and prefetch; bytes sent per rank
// 1.5x ddp's with resharding after forward and 1.0x without (SHARDED.md); memory per rank by kind as
// ZeRO-3's row of the table; the all-gathers, reduce-scatters and exposed waits in the trace; the
// flags that do not apply. (A killed or hung rank: test_strategies.cpp.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
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

std::vector<std::string> fsdp_run(const std::string& json_path, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "3"}, {"--warmup", "1"}, {"--repetitions", "1"},
                                {"--workload", "mlp"}, {"--batch", "12"}, {"--dataset-size", "48"}, {"--timeout", "30"}},
                               json_path, std::move(extra));
}

struct ParitySetting {
  int world;
  std::vector<std::string> flags;
};

class FsdpParity : public ::testing::TestWithParam<ParitySetting> {};

TEST_P(FsdpParity, MatchesSingleInFloat64) {
  const auto& setting = GetParam();
  ScratchDir dir;
  std::vector<std::string> args = {"--strategy", "fsdp", "--world-size", std::to_string(setting.world), "--parity-steps", "3"};
  args.insert(args.end(), setting.flags.begin(), setting.flags.end());
  const auto r = run_process(fsdp_run(dir.file("r.json"), args));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto* c = find_case(doc, "mlp/fsdp/world:" + std::to_string(setting.world));
  ASSERT_NE(c, nullptr);
  const auto& p = (*c)["ddpbench"]["parity"];
  EXPECT_EQ(p["dtype"], "fp64");  // the ranks gathered and reduce-scattered in float64 too
  EXPECT_LE(p["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(p["within_tolerance"].get<bool>());
  EXPECT_EQ((*c)["ddpbench"]["ranks"].size(), static_cast<std::size_t>(setting.world));
  EXPECT_EQ((*c)["ddpbench"]["comm"]["buckets"].get<int>(), 4) << "mlp's four layers, one unit each";
}

INSTANTIATE_TEST_SUITE_P(Settings, FsdpParity,
                         ::testing::Values(ParitySetting{2, {}}, ParitySetting{3, {}}, ParitySetting{4, {}},
                                           ParitySetting{3, {"--reshard-after-forward", "off"}},
                                           ParitySetting{3, {"--no-prefetch"}}, ParitySetting{2, {"--no-overlap"}}),
                         [](const auto& info) {
                           std::string name = "world" + std::to_string(info.param.world);
                           for (const auto& f : info.param.flags)
                             for (char ch : f) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

// mlp's layers are all units (no root): with resharding after forward each is gathered twice and
// reduce-scattered once, 3 x (N-1)/N of the parameters against ddp's 2 x (N-1)/N: 1.5x; without,
// 1.0x (SHARDED.md's traffic column). Padding at world 3 moves the ratio by less than 1e-4.
TEST(FsdpRun, SendsOneAndAHalfTimesDdpsBytesWithReshardingAfterForwardAndOnceWithout) {
  const int world = 3;
  for (const std::string reshard : {"on", "off"}) {
    SCOPED_TRACE("--reshard-after-forward " + reshard);
    ScratchDir dir;
    const auto r = run_process(fsdp_run(dir.file("r.json"), {"--strategy", "ddp,fsdp", "--world-size", std::to_string(world),
                                                             "--parity-steps", "0", "--reshard-after-forward", reshard}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json doc = json::parse(read_text(dir.file("r.json")));
    const double ddp_sent = (*find_case(doc, "mlp/ddp/world:3"))["ddpbench"]["comm"]["bytes_sent_per_step"].get<double>();
    const auto& d = (*find_case(doc, "mlp/fsdp/world:3"))["ddpbench"];
    const auto& comm = d["comm"];
    EXPECT_NEAR(comm["bytes_sent_per_step"].get<double>() / ddp_sent, reshard == "on" ? 1.5 : 1.0, 1e-4);
    const double rs = comm["reduce_scatter_bytes_per_step"].get<double>();
    EXPECT_EQ(comm["all_gather_bytes_per_step"].get<double>(), (reshard == "on" ? 2 : 1) * rs);
    // Each unit's bytes, what a projection needs instead of equal units: mlp's four layers, no root,
    // adding up to what was reduce-scattered; and the flag as it ran.
    ASSERT_EQ(comm["units"].size(), 4u) << comm.dump();
    double unit_sum = 0;
    for (const auto& u : comm["units"]) {
      EXPECT_FALSE(u["root"].get<bool>());
      unit_sum += u["bytes"].get<double>();
    }
    EXPECT_EQ(unit_sum, rs);
    const auto& flags = doc["context"]["ddpbench"]["settings"]["strategy_settings"]["fsdp"];
    EXPECT_EQ(flags["reshard_after_forward"].get<bool>(), reshard == "on") << flags.dump();
    EXPECT_TRUE(flags["prefetch"].get<bool>());
    EXPECT_GT(comm["reduce_scatter_ms"].get<double>(), 0);
    EXPECT_GT(comm["all_gather_ms"].get<double>(), 0);
    const auto& phases = d["phases_ms"];
    EXPECT_TRUE(phases.contains("reduce_scatter_exposed")) << phases.dump();
    EXPECT_TRUE(phases.contains("all_gather_exposed")) << phases.dump();
    EXPECT_FALSE(phases.contains("comm_exposed")) << "no all-reduce of gradients here";
  }
}

// --grad-accum 4: by default every micro-batch is a round of its own (FSDP2's default), so four
// times the all-gathers and reduce-scatters of a step without, each reduce-scatter adding into the
// chunks; under --no-sync-accum one reduce-scatter a step, and the units' unsharded gradients held
// from the first micro-batch to it: a higher peak. There a unit stays gathered from its backward to
// the next micro-batch's forward, so each further micro-batch gathers it once more, not twice.
// Both compute single's steps on the whole batch (float64 parity).
TEST(FsdpRun, AccumulatesByReduceScatteringEveryMicroBatchOrOnceHoldingTheUnshardedGradients) {
  auto run = [](const std::vector<std::string>& flags) {
    ScratchDir dir;
    std::vector<std::string> args = {"--strategy", "fsdp", "--world-size", "2", "--parity-steps", "2", "--batch", "16",
                                     "--dataset-size", "64"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_process(fsdp_run(dir.file("r.json"), args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const json doc = json::parse(read_text(dir.file("r.json")));
    const json* c = find_case(doc, "mlp/fsdp/world:2");
    return c ? (*c)["ddpbench"] : json();
  };
  const json plain = run({}), rounds = run({"--grad-accum", "4"}), held = run({"--grad-accum", "4", "--no-sync-accum"});
  for (const json* d : {&plain, &rounds, &held}) {
    ASSERT_EQ((*d)["status"], "ok") << (*d)["reason"];
    EXPECT_LE((*d)["parity"]["max_rel_param_diff"].get<double>(), 1e-9) << (*d)["parity"].dump();
  }
  auto traffic = [](const json& d, const char* kind) { return d["comm"][kind].get<double>(); };
  for (const char* kind : {"reduce_scatter_bytes_per_step", "all_gather_bytes_per_step"}) {
    EXPECT_EQ(traffic(rounds, kind), 4 * traffic(plain, kind)) << kind;
  }
  EXPECT_EQ(traffic(held, "reduce_scatter_bytes_per_step"), traffic(plain, "reduce_scatter_bytes_per_step"));
  // mlp's units are the whole model: 2 gathers of it a plain step, 2 + 3 under --no-sync-accum.
  EXPECT_EQ(traffic(held, "all_gather_bytes_per_step"), 2.5 * traffic(plain, "all_gather_bytes_per_step"));
  EXPECT_EQ(rounds["micro_batches"], 4);
  EXPECT_EQ(rounds["micro_batch_samples"], 4);
  // Each rank's unit buffers hold its unsharded gradients, mlp's whole 11.65 MB, where a plain step
  // holds at most its chunks' half of them besides a unit's buffer in flight; the activations are a
  // quarter of the plain step's either way.
  const double unsharded = 2913290.0 * 4;
  const auto peak = [](const json& d) { return d["memory"][0]["peak_allocated_bytes"].get<double>(); };
  EXPECT_GT(peak(held) - peak(plain), 0.5 * unsharded) << "held " << peak(held) << ", plain " << peak(plain);
  const auto activations = [](const json& d) { return d["memory"][0]["activation_bytes"].get<double>(); };
  EXPECT_LT(activations(rounds), 0.3 * activations(plain));
}

// ZeRO-3's row of SHARDED.md's table, per rank at world N: parameters, gradients and optimizer state
// (mlp: SGD momentum, one buffer) each 1/N of mlp's 2,913,290 float32 parameters, within padding;
// the peak holds them plus the rest (activations, gathered units, communication buffers).
TEST(FsdpMemory, EachRankHoldsOneNthOfEveryKindAndThePeakHoldsThatPlusTheRest) {
  constexpr std::int64_t kParamBytes = 2913290LL * 4;
  for (const int world : {2, 4}) {
    SCOPED_TRACE("world " + std::to_string(world));
    ScratchDir dir;
    const auto r = run_process(fsdp_run(dir.file("r.json"), {"--strategy", "ddp,fsdp", "--world-size", std::to_string(world),
                                                             "--parity-steps", "0"}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json doc = json::parse(read_text(dir.file("r.json")));
    const auto& d = (*find_case(doc, "mlp/fsdp/world:" + std::to_string(world)))["ddpbench"];
    const auto& ddp = (*find_case(doc, "mlp/ddp/world:" + std::to_string(world)))["ddpbench"];
    const std::int64_t share = kParamBytes / world, padding = 4 * (world - 1) * 4;
    ASSERT_EQ(d["memory"].size(), static_cast<std::size_t>(world));
    for (std::size_t rank = 0; rank < d["memory"].size(); ++rank) {
      const auto& m = d["memory"][rank];
      for (const char* kind : {"parameter_bytes", "gradient_bytes", "optimizer_state_bytes"}) {
        // The optimizer steps each parameter's part of the chunks: no state for the padding.
        const std::int64_t least = std::string(kind) == "optimizer_state_bytes" ? share - padding : share - 4;
        EXPECT_GE(m[kind].get<std::int64_t>(), least) << kind;
        EXPECT_LE(m[kind].get<std::int64_t>(), share + padding) << kind;
      }
      EXPECT_GT(m["other_bytes"].get<std::int64_t>(), 0);
      EXPECT_EQ(m["peak_allocated_bytes"].get<std::int64_t>(),
                m["parameter_bytes"].get<std::int64_t>() + m["gradient_bytes"].get<std::int64_t>() +
                    m["optimizer_state_bytes"].get<std::int64_t>() + m["other_bytes"].get<std::int64_t>());
      EXPECT_LT(m["peak_allocated_bytes"].get<std::int64_t>(), ddp["memory"][rank]["peak_allocated_bytes"].get<std::int64_t>())
          << "rank " << rank;
    }
  }
}

// Every unit's all-gather and reduce-scatter is an async range inside its step on every rank, and
// the waits for them are the exposed phases.
TEST(FsdpRun, TraceShowsEachUnitsAllGathersAndReduceScatterInsideItsStep) {
  ScratchDir dir;
  const auto r = run_process(fsdp_run(dir.file("r.json"), {"--strategy", "fsdp", "--parity-steps", "0", "--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto trace = testing::read_trace(dir.file("ddpbench-rank" + std::to_string(rank) + ".json"));
    const std::string name = "mlp/fsdp/world:2";
    const auto steps = trace.events_of(name, "step");
    ASSERT_EQ(steps.size(), 3u);
    // Four units a step: each gathered for forward and again for backward, reduce-scattered once.
    for (const auto& [collective, per_step] : std::vector<std::pair<const char*, std::size_t>>{{"all_gather", 8}, {"reduce_scatter", 4}}) {
      const auto ranges = trace.events_of(name, collective);
      EXPECT_EQ(ranges.size(), 3u * per_step) << collective;
      for (const auto& a : ranges) {
        EXPECT_TRUE(a.value("async", false)) << a.dump();
        EXPECT_TRUE(std::any_of(steps.begin(), steps.end(),
                                [&](const json& s) { return s["args"] == a["args"] && testing::within(a, s); }))
            << a.dump();
      }
    }
    EXPECT_FALSE(trace.events_of(name, "all_gather_exposed").empty());
    EXPECT_EQ(trace.events_of(name, "reduce_scatter_exposed").size(), steps.size());
  }
}

TEST(FsdpCli, FlagsThatDoNotApplyAreBadInputNamingTheFlag) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"--strategy", "zero1", "--reshard-after-forward", "off"},
        std::vector<std::string>{"--strategy", "ddp,zero2", "--no-prefetch"},
        std::vector<std::string>{"--strategy", "fsdp", "--bucket-mb", "4"},
        std::vector<std::string>{"--strategy", "fsdp", "--grad-as-bucket-view"},
        std::vector<std::string>{"--strategy", "fsdp", "--reshard-after-forward", "sometimes"}}) {
    const auto r = run_process(fsdp_run("", args));
    EXPECT_EQ(r.exit_code, 2) << args[2];
    EXPECT_NE(r.err.find(args[2]), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

}  // namespace
}  // namespace ddpbench
