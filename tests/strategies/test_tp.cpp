// tp: whole runs of real rank processes. Parity with single in float64 at world 2 and 4 on mlp
// (split by columns, rows, columns, rows), transformer and gpt2 (attention by heads, the MLP by
// columns then rows); each rank's parameters (mlp: gradients and optimizer state too) its shares of the split
// layers and the whole of the rest, to the byte; the bytes all-reduced a step against Megatron's
// count, timed as comm_exposed; what tp cannot split, skipped saying why.
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

std::vector<std::string> tp_run(const std::string& json_path, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "3"}, {"--warmup", "1"}, {"--repetitions", "1"},
                                {"--workload", "mlp"}, {"--batch", "12"}, {"--dataset-size", "48"}, {"--timeout", "30"}},
                               json_path, std::move(extra));
}

const json& tp_case(const json& doc, int world) {
  const auto* c = find_case(doc, "mlp/tp/world:" + std::to_string(world));
  if (c == nullptr) throw std::runtime_error("no mlp/tp case at world " + std::to_string(world));
  return (*c)["ddpbench"];
}

class TpWorld : public ::testing::TestWithParam<int> {};

// One run a world: parity in float64, memory by kind, traffic.
TEST_P(TpWorld, MatchesSingleHoldsItsSharesAndAllReducesWhatMegatronCounts) {
  const int t = GetParam();
  ScratchDir dir;
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--world-size", std::to_string(t),
                                                         "--parity-steps", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& d = tp_case(doc, t);
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_EQ(d["parity"]["dtype"], "fp64");
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>());
  ASSERT_EQ(d["ranks"].size(), static_cast<std::size_t>(t));

  // fc1 (784 -> 1024) and fc3 (1024 -> 1024) split by columns: 1/t of each weight and bias. fc2
  // (1024 -> 1024) and fc4 (1024 -> 10) split by rows: 1/t of each weight, the bias whole.
  const std::int64_t elements = (784 * 1024 + 1024) / t + 1024 * 1024 / t + 1024 + (1024 * 1024 + 1024) / t +
                                1024 * 10 / t + 10;
  ASSERT_EQ(d["memory"].size(), static_cast<std::size_t>(t));
  for (const auto& m : d["memory"]) {
    EXPECT_EQ(m["parameter_bytes"].get<std::int64_t>(), elements * 4) << m.dump();
    EXPECT_EQ(m["gradient_bytes"].get<std::int64_t>(), elements * 4) << m.dump();
    EXPECT_EQ(m["optimizer_state_bytes"].get<std::int64_t>(), elements * 4) << m.dump();  // SGD's momentum
  }

  // Forward: fc2's and fc4's partial sums, [12, 1024] and [12, 10]. Backward: fc3's input gradient,
  // [12, 1024]; fc1's input is the data, which needs none. Three all-reduces of floats a step,
  // whatever t (Megatron's cost does not shrink with the group).
  const auto& comm = d["comm"];
  EXPECT_EQ(comm["bytes_per_step"].get<std::int64_t>(), 12LL * (1024 + 10 + 1024) * 4) << comm.dump();
  EXPECT_EQ(comm["buckets"].get<int>(), 3) << comm.dump();
  EXPECT_GT(d["phases_ms"].value("comm_exposed", 0.0), 0.0) << d["phases_ms"].dump();
}

INSTANTIATE_TEST_SUITE_P(Worlds, TpWorld, ::testing::Values(2, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// gpt2 at a test's size (--gpt2-size 2:4:64:512: 2 blocks, 4 heads of 16, width 64, vocabulary 512;
// 8 tokens a sample): each block's attention by heads and its MLP by columns then rows, the
// embeddings, LayerNorms and the tied output projection whole.
class TpGpt2 : public ::testing::TestWithParam<int> {};

TEST_P(TpGpt2, AttentionByHeadsAndTheMlpMatchSingleHoldTheirSharesAndAllReduceFourTimesABlock) {
  const int t = GetParam();
  ScratchDir dir;
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--world-size", std::to_string(t),
                                                         "--workload", "gpt2", "--gpt2-size", "2:4:64:512", "--seq-len",
                                                         "8", "--batch", "2", "--dataset-size", "8", "--parity-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto* c = find_case(doc, "gpt2/tp/world:" + std::to_string(t));
  ASSERT_NE(c, nullptr);
  const auto& d = (*c)["ddpbench"];
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>());
  const std::int64_t w = 64, whole = 512 * w + 1024 * w + 2 * w;
  // A block: two LayerNorms, the row layers' biases whole; c_attn (Q, K, V), attn_proj, c_fc and
  // mlp_proj split.
  const std::int64_t block = 4 * w + 2 * w + (w * 3 * w + 3 * w + w * w + w * 4 * w + 4 * w + 4 * w * w) / t;
  for (const auto& m : d["memory"]) EXPECT_EQ(m["parameter_bytes"].get<std::int64_t>(), (whole + 2 * block) * 4) << m.dump();
  // Forward: attn_proj's and mlp_proj's partial sums; backward: c_attn's and c_fc's input
  // gradients. Four all-reduces of [2, 8, 64] floats a block.
  EXPECT_EQ(d["comm"]["buckets"].get<int>(), 4 * 2) << d["comm"].dump();
  EXPECT_EQ(d["comm"]["bytes_per_step"].get<std::int64_t>(), 4LL * 2 * (2 * 8 * w) * 4) << d["comm"].dump();
}

INSTANTIATE_TEST_SUITE_P(Worlds, TpGpt2, ::testing::Values(2, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// transformer: LibTorch's encoder layers written out (test_workloads.cpp holds them to the layers'
// own forward), each layer's attention by heads and its feed-forward by columns then rows.
class TpTransformer : public ::testing::TestWithParam<int> {};

TEST_P(TpTransformer, AttentionByHeadsAndTheFeedForwardMatchSingleAndHoldTheirShares) {
  const int t = GetParam();
  ScratchDir dir;
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--world-size", std::to_string(t),
                                                         "--workload", "transformer", "--batch", "2", "--dataset-size",
                                                         "8", "--parity-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto* c = find_case(doc, "transformer/tp/world:" + std::to_string(t));
  ASSERT_NE(c, nullptr);
  const auto& d = (*c)["ddpbench"];
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>());
  // Vocabulary 1000, width 128, 2 layers, feed-forward 512, 64 positions.
  const std::int64_t e = 128, ff = 512, whole = 1000 * e + 64 * e + e * 1000 + 1000;
  const std::int64_t layer = 4 * e + 2 * e + (3 * e * e + 3 * e + e * e + e * ff + ff + ff * e) / t;
  for (const auto& m : d["memory"]) EXPECT_EQ(m["parameter_bytes"].get<std::int64_t>(), (whole + 2 * layer) * 4) << m.dump();
  // Four all-reduces of [64, 2, 128] floats a layer.
  EXPECT_EQ(d["comm"]["buckets"].get<int>(), 4 * 2) << d["comm"].dump();
  EXPECT_EQ(d["comm"]["bytes_per_step"].get<std::int64_t>(), 4LL * 2 * (64 * 2 * e) * 4) << d["comm"].dump();
}

INSTANTIATE_TEST_SUITE_P(Worlds, TpTransformer, ::testing::Values(2, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

TEST(TpRun, SkipsWhatItCannotSplitSayingWhy) {
  ScratchDir dir;
  // mlp at world 3: fc1's 1024 outputs do not split three ways. convnet: no plan.
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--world-size", "3", "--workload",
                                                         "mlp,convnet"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto& mlp = tp_case(doc, 3);
  EXPECT_EQ(mlp["status"], "skipped");
  EXPECT_EQ(mlp["reason"], "tp: mlp: fc1's 1024 outputs (split by columns) do not divide among 3 ranks (--world-size)");
  const auto* convnet = find_case(doc, "convnet/tp/world:3");
  ASSERT_NE(convnet, nullptr);
  EXPECT_EQ((*convnet)["ddpbench"]["status"], "skipped");
  EXPECT_TRUE(testing::skipped_as_unsplittable((*convnet)["ddpbench"]));
  // gpt2's 4 heads at world 3: Q, K and V are each 64 features, but a rank holds whole heads of 16.
  const auto g = run_process(tp_run(dir.file("g.json"), {"--strategy", "tp", "--world-size", "3", "--workload", "gpt2",
                                                         "--gpt2-size", "2:4:64:512", "--seq-len", "8", "--batch", "3"}));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const json gpt2_doc = json::parse(read_text(dir.file("g.json")));
  const auto* gpt2 = find_case(gpt2_doc, "gpt2/tp/world:3");
  ASSERT_NE(gpt2, nullptr);
  EXPECT_EQ((*gpt2)["ddpbench"]["reason"],
            "tp: gpt2: h0.c_attn's 192 outputs (3 packed parts of 64) in groups of 16 (split by columns) do not divide "
            "among 3 ranks (--world-size)");
}

}  // namespace
}  // namespace ddpbench
