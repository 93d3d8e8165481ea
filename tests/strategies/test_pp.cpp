// pp: whole runs of real rank processes. Parity with single in float64 under every schedule at
// world 2 to 4 (mlp's four layers, cut evenly), with the pipeline the ranks ran and its bubble per
// rank in the JSON; each rank holds its own stages' parameters only; the waits on neighbours are a
// phase of their own and spans in the trace, as each micro-batch's forward and backward are; a
// killed or hung stage; a case the shape does not fit is skipped saying why; the flags that do not
// apply.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

std::vector<std::string> pp_run(const std::string& json_path, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "3"}, {"--warmup", "1"}, {"--repetitions", "1"},
                                {"--workload", "mlp"}, {"--batch", "12"}, {"--dataset-size", "48"}, {"--timeout", "30"}},
                               json_path, std::move(extra));
}

struct Setting {
  int world;
  std::vector<std::string> flags;
};

class PpParity : public ::testing::TestWithParam<Setting> {};

TEST_P(PpParity, MatchesSingleInFloat64) {
  const auto& setting = GetParam();
  ScratchDir dir;
  std::vector<std::string> args = {"--strategy", "pp", "--world-size", std::to_string(setting.world), "--parity-steps", "3"};
  args.insert(args.end(), setting.flags.begin(), setting.flags.end());
  const auto r = run_process(pp_run(dir.file("r.json"), args));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto* c = find_case(doc, "mlp/pp/world:" + std::to_string(setting.world));
  ASSERT_NE(c, nullptr);
  const auto& d = (*c)["ddpbench"];
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  const auto& p = d["parity"];
  EXPECT_EQ(p["dtype"], "fp64");
  EXPECT_LE(p["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(p["within_tolerance"].get<bool>());
  EXPECT_EQ(d["ranks"].size(), static_cast<std::size_t>(setting.world));
  EXPECT_TRUE(d["phases_ms"].contains("pipeline_wait")) << d["phases_ms"].dump();
  // Every stage but the last sends its output forward, every stage but the first its input's
  // gradient back: mlp's boundaries are [micro-batch, 1024] floats, 4 micro-batch rows x 1024 x 4
  // bytes each way at a batch of 12, a rank sending at most two such per micro-batch.
  EXPECT_GT(d["comm"]["point_to_point_bytes_per_step"].get<double>(), 0);
  // The pipeline the ranks ran, as they report it (the flags reached them), and its bubble on every
  // rank beside the formula's.
  std::string schedule = "1f1b";
  for (std::size_t i = 0; i + 1 < setting.flags.size(); ++i)
    if (setting.flags[i] == "--pp-schedule") schedule = setting.flags[i + 1];
  const auto& line = d["pipeline"];
  ASSERT_TRUE(line.is_object()) << d.dump();
  EXPECT_EQ(line["schedule"], schedule);
  const int chunks = schedule == "interleaved-1f1b" ? 2 : 1, stages = setting.world * chunks;
  EXPECT_EQ(line["stages"].get<int>(), stages);
  EXPECT_EQ(line["chunks_per_rank"].get<int>(), chunks);
  const int m = line["microbatches"].get<int>();
  EXPECT_EQ(12 % m, 0);
  if (schedule == "naive") {
    EXPECT_EQ(m, 1);
  }
  const double ranks = setting.world;
  EXPECT_DOUBLE_EQ(line["expected_bubble"].get<double>(), (ranks - 1) / (chunks * m + ranks - 1));
  ASSERT_EQ(line["stage_units"].size(), static_cast<std::size_t>(stages));
  EXPECT_EQ(line["stage_units"].front()[0], 0);
  EXPECT_EQ(line["stage_units"].back()[1], 4) << "mlp's four layers, every one in a stage";
  ASSERT_EQ(line["bubble_by_rank"].size(), static_cast<std::size_t>(setting.world));
  for (const auto& b : line["bubble_by_rank"]) EXPECT_TRUE(b.get<double>() > 0 && b.get<double>() < 1) << line.dump();
}

INSTANTIATE_TEST_SUITE_P(Schedules, PpParity,
                         ::testing::Values(Setting{2, {"--pp-schedule", "naive"}}, Setting{2, {"--pp-schedule", "gpipe"}},
                                           Setting{2, {}}, Setting{3, {}}, Setting{4, {"--pp-schedule", "gpipe"}},
                                           Setting{4, {}}, Setting{2, {"--pp-schedule", "interleaved-1f1b"}},
                                           Setting{2, {"--microbatches", "12"}}),
                         [](const auto& info) {
                           std::string name = "world" + std::to_string(info.param.world);
                           for (const auto& f : info.param.flags)
                             for (char ch : f) name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return name;
                         });

// mlp's four layers cut in two: rank 0 holds 784x1024 and 1024x1024 with their biases, rank 1 the
// second 1024x1024 and 1024x10; each rank's parameters, gradients and SGD momentum are its own.
TEST(PpMemory, EachRankHoldsItsOwnStagesParametersOnly) {
  ScratchDir dir;
  const auto r = run_process(pp_run(dir.file("r.json"), {"--strategy", "pp", "--world-size", "2", "--parity-steps", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& memory = (*find_case(doc, "mlp/pp/world:2"))["ddpbench"]["memory"];
  ASSERT_EQ(memory.size(), 2u);
  const std::int64_t first = (784 * 1024 + 1024 + 1024 * 1024 + 1024) * 4LL, second = (1024 * 1024 + 1024 + 1024 * 10 + 10) * 4LL;
  EXPECT_EQ(memory[0]["parameter_bytes"].get<std::int64_t>(), first);
  EXPECT_EQ(memory[1]["parameter_bytes"].get<std::int64_t>(), second);
  EXPECT_EQ(memory[0]["gradient_bytes"].get<std::int64_t>(), first);
  EXPECT_EQ(memory[1]["optimizer_state_bytes"].get<std::int64_t>(), second);
}

// transformer has two units: three stages do not fit, and the case says so instead of failing.
TEST(PpRun, SkipsACaseWithMoreStagesThanUnitsSayingWhy) {
  ScratchDir dir;
  const auto r = run_process(testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "1"}, {"--warmup", "0"},
                                                    {"--repetitions", "1"}, {"--workload", "transformer"}, {"--batch", "6"},
                                                    {"--dataset-size", "12"}, {"--timeout", "30"}},
                                                   dir.file("r.json"), {"--strategy", "pp", "--world-size", "3", "--parity-steps", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& d = (*find_case(doc, "transformer/pp/world:3"))["ddpbench"];
  EXPECT_EQ(d["status"], "skipped");
  EXPECT_NE(d["reason"].get<std::string>().find("need a unit each, and transformer has 2"), std::string::npos) << d["reason"];
}

// Each micro-batch's forward and backward, and each wait on a neighbour, is a span of its own in
// every rank's trace: 1F1B at world 2 with 4 micro-batches runs 4 forwards and 4 backwards a step.
TEST(PpRun, TraceShowsEachMicroBatchsForwardBackwardAndWaits) {
  ScratchDir dir;
  const auto r = run_process(pp_run(dir.file("r.json"), {"--strategy", "pp", "--parity-steps", "0", "--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (int rank = 0; rank < 2; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const auto trace = testing::read_trace(dir.file("ddpbench-rank" + std::to_string(rank) + ".json"));
    const std::string name = "mlp/pp/world:2";
    ASSERT_EQ(trace.events_of(name, "step").size(), 3u);
    EXPECT_EQ(trace.events_of(name, "forward").size(), 3u * 4);
    EXPECT_EQ(trace.events_of(name, "backward").size(), 3u * 4);
    // Rank 1 waits for each micro-batch's activation, rank 0 for each one's gradient.
    EXPECT_GE(trace.events_of(name, "pipeline_wait").size(), 3u * 4);
  }
}

TEST(PpRun, KilledStageFailsTheCaseNamesItAndLeavesNoProcess) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto r = run_process(pp_run(dir.file("r.json"), {"--strategy", "pp"}), 0, {{"DDPBENCH_FAULT_RANK", "1:kill"}, marker});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 was killed by signal 9 (SIGKILL)"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 25) << "the launcher waited for a timeout it did not need";
  EXPECT_TRUE(testing::processes_with(testing::marker_text(marker)).empty()) << "a rank outlived the run";
}

TEST(PpRun, HungStageIsKilledWithinTheTimeoutAndNamed) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  const auto r = run_process(pp_run(dir.file("r.json"), {"--strategy", "pp", "--timeout", "4"}), 0,
                             {{"DDPBENCH_FAULT_RANK", "1:hang"}, marker});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("rank 1 hung"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 4 + 12) << "the run outlived its timeout by far";
  EXPECT_TRUE(testing::processes_with(testing::marker_text(marker)).empty()) << "a rank outlived the run";
}

TEST(PpCli, FlagsThatCannotApplyAreOneLineAndExit2) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--strategy", "ddp", "--microbatches", "4"}, "--microbatches: applies to pp only"},
      {{"--strategy", "ddp", "--pp-schedule", "gpipe"}, "--pp-schedule: applies to pp only"},
      {{"--strategy", "pp", "--pp-schedule", "zigzag"}, "--pp-schedule: unknown schedule 'zigzag'"},
      {{"--strategy", "pp", "--stages-per-rank", "2"}, "--stages-per-rank applies to --pp-schedule interleaved-1f1b only"},
      {{"--strategy", "pp", "--pp-schedule", "interleaved-1f1b", "--stages-per-rank", "1"}, "needs --stages-per-rank 2 or more"},
      {{"--strategy", "pp", "--pp-schedule", "naive", "--microbatches", "4"}, "naive runs the whole batch at once"},
      {{"--strategy", "pp", "--microbatches", "0"}, "--microbatches"},
  };
  for (const auto& [args, words] : cases) {
    ScratchDir dir;
    const auto r = run_process(pp_run(dir.file("r.json"), args));
    EXPECT_EQ(r.exit_code, 2) << words;
    EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << "one line: " << r.err;
  }
}

}  // namespace
}  // namespace ddpbench
