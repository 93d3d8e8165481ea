// tp: whole runs of real rank processes. Parity with single in float64 at world 2 and 4 on mlp
// (split by columns, rows, columns, rows), transformer and gpt2 (attention by heads, the MLP by
// columns then rows, the embedding and output layer by vocabulary; gpt2 at world 3 too, unevenly);
// --sequence-parallel on transformer and gpt2 at world 2 and 4; each rank's parameters (mlp: gradients and optimizer state too) its shares of the split
// layers and the whole of the rest, to the byte; the bytes all-reduced a step against Megatron's
// count, timed as comm_exposed; what tp cannot split, skipped saying why; on the mesh dp=2,tp=2,
// parity (with --sequence-parallel too) and each dimension's traffic.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

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

// gpt2 at a test's size (2 blocks of heads of 16, 8 tokens a sample): the token embedding, and with
// it the tied output projection, split by vocabulary with the loss on the split logits; each
// block's attention by heads and its MLP by columns then rows; the position table and LayerNorms
// whole. World 3 splits a vocabulary of 509 unevenly (170, 170, 169 rows).
struct Gpt2Geometry {
  int world;
  std::int64_t heads, width, vocab;
};

class TpGpt2 : public ::testing::TestWithParam<Gpt2Geometry> {};

TEST_P(TpGpt2, MatchesSingleHoldsItsSharesOfTheVocabularyAndTheBlocksAndAllReducesWhatMegatronCounts) {
  const auto [t, heads, w, vocab] = GetParam();
  const std::string size = "2:" + std::to_string(heads) + ":" + std::to_string(w) + ":" + std::to_string(vocab);
  ScratchDir dir;
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--world-size", std::to_string(t),
                                                         "--workload", "gpt2", "--gpt2-size", size, "--seq-len",
                                                         "8", "--batch", "2", "--dataset-size", "8", "--parity-steps", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto* c = find_case(doc, "gpt2/tp/world:" + std::to_string(t));
  ASSERT_NE(c, nullptr);
  const auto& d = (*c)["ddpbench"];
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>());
  // Whole: the 1024 positions and ln_f. A block: two LayerNorms and the row layers' biases whole;
  // c_attn (Q, K, V), attn_proj, c_fc and mlp_proj split. The token table: the rank's rows.
  const std::int64_t whole = 1024 * w + 2 * w;
  const std::int64_t block = 4 * w + 2 * w + (w * 3 * w + 3 * w + w * w + w * 4 * w + 4 * w + 4 * w * w) / t;
  ASSERT_EQ(d["memory"].size(), static_cast<std::size_t>(t));
  for (int rank = 0; rank < t; ++rank) {
    const std::int64_t rows = vocab / t + (rank < vocab % t ? 1 : 0);
    EXPECT_EQ(d["memory"][rank]["parameter_bytes"].get<std::int64_t>(), (whole + 2 * block + rows * w) * 4)
        << "rank " << rank << ": " << d["memory"][rank].dump();
  }
  // A block: attn_proj's and mlp_proj's partial sums forward, c_attn's and c_fc's input gradients
  // backward, each [2, 8, w] floats. Then the embedding's lookups forward and the output
  // projection's input gradient backward, the same size, and the loss's two of a number or two a
  // token: each token's maximum logit, then its target's logit with its sum of exponentials.
  const std::int64_t activation = 2 * 8 * w * 4, tokens = 2 * 8;
  EXPECT_EQ(d["comm"]["buckets"].get<int>(), 4 * 2 + 2 + 2) << d["comm"].dump();
  EXPECT_EQ(d["comm"]["bytes_per_step"].get<std::int64_t>(), (4 * 2 + 2) * activation + tokens * 4 + 2 * tokens * 4)
      << d["comm"].dump();
}

INSTANTIATE_TEST_SUITE_P(Worlds, TpGpt2,
                         ::testing::Values(Gpt2Geometry{2, 4, 64, 512}, Gpt2Geometry{3, 3, 48, 509},
                                           Gpt2Geometry{4, 4, 64, 512}),
                         [](const auto& info) { return "world" + std::to_string(info.param.world); });

// transformer: LibTorch's encoder layers written out (test_workloads.cpp holds them to the layers'
// own forward), each layer's attention by heads and its feed-forward by columns then rows, the
// token table and the head by vocabulary.
class TpTransformer : public ::testing::TestWithParam<int> {};

TEST_P(TpTransformer, AttentionByHeadsTheFeedForwardAndTheVocabularyMatchSingleAndHoldTheirShares) {
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
  // Vocabulary 1000, width 128, 2 layers, feed-forward 512, 64 positions (whole); the token table
  // and the head (weight and bias) 1/t each.
  const std::int64_t e = 128, ff = 512, whole = 64 * e + (1000 * e + e * 1000 + 1000) / t;
  const std::int64_t layer = 4 * e + 2 * e + (3 * e * e + 3 * e + e * e + e * ff + ff + ff * e) / t;
  for (const auto& m : d["memory"]) EXPECT_EQ(m["parameter_bytes"].get<std::int64_t>(), (whole + 2 * layer) * 4) << m.dump();
  // Four all-reduces of [64, 2, 128] floats a layer, the embedding's and the head's input
  // gradient's of the same size, and the loss's two of 128 tokens' numbers.
  EXPECT_EQ(d["comm"]["buckets"].get<int>(), 4 * 2 + 2 + 2) << d["comm"].dump();
  EXPECT_EQ(d["comm"]["bytes_per_step"].get<std::int64_t>(), (4 * 2 + 2) * (64 * 2 * e) * 4 + 3 * 128 * 4)
      << d["comm"].dump();
}

INSTANTIATE_TEST_SUITE_P(Worlds, TpTransformer, ::testing::Values(2, 4),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// --sequence-parallel: the blocks' all-reduces become reduce-scatters and all-gathers of the same
// size, the hidden state between them each rank's share of the sequence. Parity in float64 on gpt2
// (batch-first) and transformer (sequence-first) at world 2 and 4, which fails where the
// LayerNorms' and the row layers' biases' gradients are left unsummed; the collectives counted;
// transformer's peak memory beside its activations lower than without it.
struct SequenceParallelCase {
  std::string workload;
  int world;
};

class TpSequenceParallel : public ::testing::TestWithParam<SequenceParallelCase> {};

TEST_P(TpSequenceParallel, MatchesSingleReduceScattersAndAllGathersWhatItAllReducedAndHoldsLessBetweenTheBlocks) {
  const auto& [workload, t] = GetParam();
  const bool gpt2 = workload == "gpt2";
  // gpt2: 2 blocks, width 64, a vocabulary of 512, 8 tokens; transformer: 2 layers, width 128, 64 tokens.
  const std::int64_t layers = 2, width = gpt2 ? 64 : 128, tokens = gpt2 ? 8 : 64, batch = 4;
  std::vector<std::string> args = {"--strategy", "tp", "--world-size", std::to_string(t), "--workload", workload,
                                   "--batch", std::to_string(batch), "--dataset-size", "16", "--parity-steps", "2"};
  if (gpt2) args.insert(args.end(), {"--gpt2-size", "2:4:64:512", "--seq-len", "8"});
  ScratchDir dir;
  const auto whole_run = run_process(tp_run(dir.file("whole.json"), args));
  args.push_back("--sequence-parallel");
  const auto r = run_process(tp_run(dir.file("r.json"), args));
  ASSERT_EQ(whole_run.exit_code, 0) << whole_run.err;
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string name = workload + "/tp/world:" + std::to_string(t);
  const json doc = json::parse(read_text(dir.file("r.json")));
  const json whole_doc = json::parse(read_text(dir.file("whole.json")));
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["strategy_settings"]["tp"]["sequence_parallel"], true);
  const auto* c = find_case(doc, name);
  const auto* w = find_case(whole_doc, name);
  ASSERT_NE(c, nullptr);
  ASSERT_NE(w, nullptr);
  const auto& d = (*c)["ddpbench"];
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>());

  // A block's four all-reduces of [batch, tokens, width] floats become two reduce-scatters forward
  // (the row layers') and two backward (the column layers' input gradients), two all-gathers
  // forward (the column layers' inputs) and two backward (the row layers' output gradients). Then
  // the output layer's input, all-gathered forward and reduce-scattered backward, and the share
  // taken where the blocks begin, all-gathered backward. Each counts its whole buffer.
  const std::int64_t activation = batch * tokens * width * 4;
  const auto& comm = d["comm"];
  EXPECT_EQ(comm["reduce_scatter_bytes_per_step"].get<std::int64_t>(), (4 * layers + 1) * activation) << comm.dump();
  EXPECT_EQ(comm["all_gather_bytes_per_step"].get<std::int64_t>(), (4 * layers + 2) * activation) << comm.dump();
  // All-reduced still: the embedding's lookups, the loss's two (1 and 2 floats a token), and the
  // gradients of what ran on the shares: each block's two LayerNorms and two row biases (and
  // gpt2's ln_f), in one.
  const std::int64_t shared_gradients = layers * (2 * 2 * width + 2 * width) + (gpt2 ? 2 * width : 0);
  EXPECT_EQ(comm["bytes_per_step"].get<std::int64_t>(),
            activation + 3 * batch * tokens * 4 + shared_gradients * 4) << comm.dump();
  EXPECT_EQ(comm["buckets"].get<int>(), (4 * layers + 1) + (4 * layers + 2) + 4) << comm.dump();
  EXPECT_EQ(comm["reduce_scatters_per_step"].get<int>(), 4 * layers + 1) << comm.dump();
  EXPECT_EQ(comm["all_gathers_per_step"].get<int>(), 4 * layers + 2) << comm.dump();
  EXPECT_EQ(whole_doc["context"]["ddpbench"]["settings"]["strategy_settings"]["tp"]["sequence_parallel"], false);
  EXPECT_EQ((*w)["ddpbench"]["comm"]["reduce_scatter_bytes_per_step"].get<std::int64_t>(), 0);

  // Between the blocks each rank holds its share of the tokens. Memory by kind has no activations
  // yet (issue 46), so this holds only that the peak of the rest falls, on transformer, where the
  // blocks' activations make it (gpt2 at this size peaks elsewhere: at world 4 rank 3's rose by
  // 3.5 KB). Measured: 3.50 -> 3.30 MB at world 2, 2.73 -> 2.36 MB at world 4.
  ASSERT_EQ(d["memory"].size(), static_cast<std::size_t>(t));
  if (!gpt2) {
    for (int rank = 0; rank < t; ++rank) {
      const auto split = d["memory"][rank]["other_bytes"].get<std::int64_t>();
      const auto whole = (*w)["ddpbench"]["memory"][rank]["other_bytes"].get<std::int64_t>();
      EXPECT_LT(split, whole) << "rank " << rank;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Worlds, TpSequenceParallel,
                         ::testing::Values(SequenceParallelCase{"gpt2", 2}, SequenceParallelCase{"gpt2", 4},
                                           SequenceParallelCase{"transformer", 2},
                                           SequenceParallelCase{"transformer", 4}),
                         [](const auto& info) { return info.param.workload + "_world" + std::to_string(info.param.world); });

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
  // --sequence-parallel: mlp has no sequence; gpt2's 6 tokens do not split four ways.
  const auto sp = run_process(tp_run(dir.file("sp.json"), {"--strategy", "tp", "--sequence-parallel", "--world-size",
                                                           "4", "--workload", "mlp,gpt2", "--gpt2-size", "2:4:64:512",
                                                           "--seq-len", "6", "--batch", "4"}));
  ASSERT_EQ(sp.exit_code, 0) << sp.err;
  const json sp_doc = json::parse(read_text(dir.file("sp.json")));
  EXPECT_EQ(tp_case(sp_doc, 4)["reason"],
            "tp --sequence-parallel splits the hidden state by its sequence, and mlp's model has none to split");
  const auto* gpt2_sp = find_case(sp_doc, "gpt2/tp/world:4");
  ASSERT_NE(gpt2_sp, nullptr);
  EXPECT_EQ((*gpt2_sp)["ddpbench"]["reason"],
            "tp --sequence-parallel: gpt2's 6 tokens a sample (--seq-len) do not divide among 4 ranks (--world-size)");
}

// On the mesh dp=2,tp=2 (ranks 0 and 1 a tp pair, 2 and 3 the other; 0 and 2 a dp pair): parity
// with single in float64 on mlp and transformer, each rank the shares of a split over 2; the tp
// dimension all-reduces what 1-D tp does for its pair's half of the batch (6 of 12 samples), the
// dp dimension each rank's held gradients and the loss. Without the dp reduction the pairs would
// train apart on their halves: with it left out, parity failed at 0.149 on mlp (fc4.bias; 2026-11-27).
TEST(TpMesh, DataParallelOverTensorParallelPairsMatchesSingleAndSaysEachDimensionsTraffic) {
  ScratchDir dir;
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--mesh", "dp=2,tp=2", "--workload",
                                                         "mlp,transformer", "--parity-steps", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["strategy_settings"]["mesh"], "dp=2,tp=2");
  const auto& d = tp_case(doc, 4);
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_EQ(d["parity"]["dtype"], "fp64");
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  ASSERT_EQ(d["ranks"].size(), 4u);
  // TpWorld's count at t = 2.
  const std::int64_t elements = (784 * 1024 + 1024) / 2 + 1024 * 1024 / 2 + 1024 + (1024 * 1024 + 1024) / 2 +
                                1024 * 10 / 2 + 10;
  for (const auto& m : d["memory"]) EXPECT_EQ(m["parameter_bytes"].get<std::int64_t>(), elements * 4) << m.dump();
  const auto& mesh = d["comm"]["mesh"];
  ASSERT_EQ(mesh.size(), 2u) << d["comm"].dump();
  EXPECT_EQ(mesh[0]["name"], "dp");
  EXPECT_EQ(mesh[0]["size"], 2);
  EXPECT_EQ(mesh[1]["name"], "tp");
  EXPECT_EQ(mesh[1]["size"], 2);
  EXPECT_EQ(mesh[1]["bytes_per_step"].get<std::int64_t>(), 6LL * (1024 + 10 + 1024) * 4) << mesh.dump();
  EXPECT_EQ(mesh[1]["collectives_per_step"], 3);
  // Every held gradient, and the loss riding in the first bucket.
  const auto dp_bytes = mesh[0]["bytes_per_step"].get<std::int64_t>();
  EXPECT_GE(dp_bytes, elements * 4) << mesh.dump();
  EXPECT_LE(dp_bytes, elements * 4 + 64) << mesh.dump();
  EXPECT_GE(mesh[0]["collectives_per_step"].get<int>(), 1);
  const auto* transformer = find_case(doc, "transformer/tp/world:4");
  ASSERT_NE(transformer, nullptr);
  ASSERT_EQ((*transformer)["ddpbench"]["status"], "ok") << (*transformer)["ddpbench"]["reason"];
  EXPECT_LE((*transformer)["ddpbench"]["parity"]["max_rel_param_diff"].get<double>(), 1e-9);

  // Under --sequence-parallel the LayerNorms' gradients are summed over the tp pair after the dp
  // buckets have averaged them: a small gpt2 still matches single.
  const auto sp = run_process(tp_run(dir.file("sp.json"), {"--strategy", "tp", "--mesh", "dp=2,tp=2",
                                                           "--sequence-parallel", "--workload", "gpt2", "--gpt2-size",
                                                           "2:4:64:512", "--seq-len", "8", "--batch", "8",
                                                           "--parity-steps", "3"}));
  ASSERT_EQ(sp.exit_code, 0) << sp.err;
  const json sp_doc = json::parse(read_text(dir.file("sp.json")));
  const auto* gpt2 = find_case(sp_doc, "gpt2/tp/world:4");
  ASSERT_NE(gpt2, nullptr);
  ASSERT_EQ((*gpt2)["ddpbench"]["status"], "ok") << (*gpt2)["ddpbench"]["reason"];
  EXPECT_LE((*gpt2)["ddpbench"]["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_GT((*gpt2)["ddpbench"]["comm"]["all_gathers_per_step"].get<int>(), 0);
}

// On the mesh fsdp=2,tp=2 each rank's tp shares are sharded again over its fsdp pair, unit by unit,
// as fsdp shards a model: parity with single in float64 on mlp, transformer and gpt2 (its tied
// embedding with the root), each rank holding half of its tp shares between steps, and the fsdp
// dimension's traffic fsdp's: each unit gathered for forward and again for backward, its gradients
// reduce-scattered, the loss all-reduced. Gradients entering the reduce-scatters unweighted by the
// pair's share of the batch failed parity at 0.0425 on mlp (fc4.bias; 2026-11-28).
TEST(TpMesh, FsdpOverTensorParallelPairsMatchesSingleAndHoldsHalfOfEachShare) {
  ScratchDir dir;
  const auto r = run_process(tp_run(dir.file("r.json"), {"--strategy", "tp", "--mesh", "fsdp=2,tp=2", "--workload",
                                                         "mlp,transformer", "--parity-steps", "3"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["strategy_settings"]["mesh"], "fsdp=2,tp=2");
  const auto& d = tp_case(doc, 4);
  ASSERT_EQ(d["status"], "ok") << d["reason"];
  EXPECT_EQ(d["parity"]["dtype"], "fp64");
  EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  // TpWorld's count at t = 2, halved by the fsdp pair (mlp's units need no padding at 2 ranks).
  const std::int64_t elements = (784 * 1024 + 1024) / 2 + 1024 * 1024 / 2 + 1024 + (1024 * 1024 + 1024) / 2 +
                                1024 * 10 / 2 + 10;
  ASSERT_EQ(d["memory"].size(), 4u);
  for (const auto& m : d["memory"]) {
    EXPECT_EQ(m["parameter_bytes"].get<std::int64_t>(), elements * 4 / 2) << m.dump();
    EXPECT_EQ(m["gradient_bytes"].get<std::int64_t>(), elements * 4 / 2) << m.dump();
  }
  const auto& mesh = d["comm"]["mesh"];
  ASSERT_EQ(mesh.size(), 2u) << d["comm"].dump();
  EXPECT_EQ(mesh[0]["name"], "fsdp");
  EXPECT_EQ(mesh[0]["size"], 2);
  EXPECT_EQ(mesh[1]["name"], "tp");
  // tp's all-reduces as on dp=2,tp=2: each pair's half of the batch.
  EXPECT_EQ(mesh[1]["bytes_per_step"].get<std::int64_t>(), 6LL * (1024 + 10 + 1024) * 4) << mesh.dump();
  // Two all-gathers and one reduce-scatter of every unit's payload (all of a rank's tp shares), and
  // the loss: mlp's 4 units, 4 + 4 + 4 + 1 collectives.
  EXPECT_EQ(mesh[0]["bytes_per_step"].get<std::int64_t>(), 3 * elements * 4 + 4) << mesh.dump();
  EXPECT_EQ(mesh[0]["collectives_per_step"], 13) << mesh.dump();
  const auto* transformer = find_case(doc, "transformer/tp/world:4");
  ASSERT_NE(transformer, nullptr);
  ASSERT_EQ((*transformer)["ddpbench"]["status"], "ok") << (*transformer)["ddpbench"]["reason"];
  EXPECT_LE((*transformer)["ddpbench"]["parity"]["max_rel_param_diff"].get<double>(), 1e-9);

  const auto g = run_process(tp_run(dir.file("gpt2.json"), {"--strategy", "tp", "--mesh", "fsdp=2,tp=2", "--workload",
                                                            "gpt2", "--gpt2-size", "2:4:64:512", "--seq-len", "8",
                                                            "--batch", "8", "--parity-steps", "3"}));
  ASSERT_EQ(g.exit_code, 0) << g.err;
  const json gpt2_doc = json::parse(read_text(dir.file("gpt2.json")));
  const auto* gpt2 = find_case(gpt2_doc, "gpt2/tp/world:4");
  ASSERT_NE(gpt2, nullptr);
  ASSERT_EQ((*gpt2)["ddpbench"]["status"], "ok") << (*gpt2)["ddpbench"]["reason"];
  EXPECT_LE((*gpt2)["ddpbench"]["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
}

// --grad-accum 2 on fsdp=2,tp=2: each micro-batch a round of the units' gathers and reduce-scatters
// by default (FSDP2's, as fsdp's), added into the chunks: twice the fsdp dimension's plain traffic
// and collectives a step; --no-sync-accum keeps the unsharded gradients to one reduce-scatter, fewer
// collectives. All three match single in float64.
TEST(TpMesh, AccumulatesOnTheFsdpMeshARoundAMicroBatchOrOneUnderNoSyncAccum) {
  ScratchDir dir;
  std::map<std::string, json> runs;
  for (const auto& [name, flags] : std::vector<std::pair<std::string, std::vector<std::string>>>{
           {"plain", {}}, {"rounds", {"--grad-accum", "2"}}, {"held", {"--grad-accum", "2", "--no-sync-accum"}}}) {
    std::vector<std::string> args = {"--strategy", "tp", "--mesh", "fsdp=2,tp=2", "--parity-steps", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_process(tp_run(dir.file(name + ".json"), args));
    ASSERT_EQ(r.exit_code, 0) << name << ": " << r.err;
    runs[name] = tp_case(json::parse(read_text(dir.file(name + ".json"))), 4);
    const auto& d = runs[name];
    ASSERT_EQ(d["status"], "ok") << name << ": " << d["reason"];
    EXPECT_LE(d["parity"]["max_rel_param_diff"].get<double>(), 1e-9) << name;
  }
  const auto fsdp = [&](const std::string& name) { return runs[name]["comm"]["mesh"][0]; };
  ASSERT_EQ(fsdp("rounds")["name"], "fsdp");
  EXPECT_EQ(fsdp("rounds")["bytes_per_step"].get<std::int64_t>(), 2 * fsdp("plain")["bytes_per_step"].get<std::int64_t>());
  EXPECT_EQ(fsdp("rounds")["collectives_per_step"].get<int>(), 2 * fsdp("plain")["collectives_per_step"].get<int>());
  EXPECT_LT(fsdp("held")["collectives_per_step"].get<int>(), fsdp("rounds")["collectives_per_step"].get<int>());
}

}  // namespace
}  // namespace ddpbench
