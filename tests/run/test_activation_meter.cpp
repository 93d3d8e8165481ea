// Activations as a kind of memory (run/activation_meter.h), and what --activation-checkpointing does
// to them, through the real binary: mlp's saved tensors are known exactly (WORKLOADS.md), gpt2's
// fall to about its units' inputs under full checkpointing, and the recomputation is its own phase.
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
using testing::tiny_run;

json run_case(const std::vector<std::string>& extra, const std::string& name) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), extra));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const json* c = find_case(doc, name);
  if (c == nullptr) {
    ADD_FAILURE() << "no case " << name;
    return json();
  }
  return (*c)["ddpbench"];
}

TEST(ActivationMeter, MlpSavesItsThreeHiddenActivationsAndItsLogSoftmaxToWithinOneTensor) {
  // Linear -> ReLU three times, then Linear -> cross-entropy. ReLU keeps its output (B x 1024 fp32)
  // for backward, three times; Linear keeps its input (the ReLU's output again, or the batch, which
  // was on the device before forward) and its weight (a parameter); log-softmax keeps its output
  // (B x 10); the pre-activations and the logits are freed as soon as the next op has read them.
  // The rest is the loss and its bookkeeping scalars: less than the smallest tensor above.
  for (const int batch : {32, 128}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    const json d = run_case({"--strategy", "single", "--workload", "mlp", "--batch", std::to_string(batch),
                             "--dataset-size", std::to_string(2 * batch), "--parity-steps", "0"},
                            "mlp/single/world:1");
    const std::int64_t hidden = static_cast<std::int64_t>(batch) * 1024 * 4, log_softmax = static_cast<std::int64_t>(batch) * 10 * 4;
    const std::int64_t measured = d["memory"][0]["activation_bytes"].get<std::int64_t>();
    EXPECT_GE(measured, 3 * hidden + log_softmax) << d["memory"].dump();
    EXPECT_LT(measured, 3 * hidden + 2 * log_softmax) << d["memory"].dump();
  }
}

TEST(ActivationMeter, DdpRanksEachHoldTheirHalfOfTheBatchsActivations) {
  const json d = run_case({"--strategy", "ddp", "--workload", "mlp", "--world-size", "2", "--batch", "64",
                           "--dataset-size", "128", "--parity-steps", "0", "--repetitions", "1"},
                          "mlp/ddp/world:2");
  const std::int64_t half = 32 * (3 * 1024 + 10) * 4;
  ASSERT_EQ(d["memory"].size(), 2u);
  for (const auto& m : d["memory"]) {
    EXPECT_GE(m["activation_bytes"].get<std::int64_t>(), half) << m.dump();
    EXPECT_LT(m["activation_bytes"].get<std::int64_t>(), half + 32 * 10 * 4) << m.dump();
  }
}

TEST(ActivationCheckpointing, OnGpt2FullKeepsAboutTheUnitsInputsEveryTwoHalfAndTheRecomputationIsAPhase) {
  // 4 blocks of width 128 at 32 tokens, batch 4: each block's input is 4 x 32 x 128 fp32 = 64 KiB.
  const std::vector<std::string> gpt2 = {"--strategy", "single", "--workload", "gpt2", "--gpt2-size", "4:4:128:512",
                                         "--seq-len", "32", "--batch", "4", "--dataset-size", "8",
                                         "--repetitions", "1", "--parity-steps", "0"};
  auto with = [&](const std::string& policy) {
    auto args = gpt2;
    args.insert(args.end(), {"--activation-checkpointing", policy});
    return run_case(args, "gpt2/single/world:1");
  };
  const json none = with("none"), full = with("full"), every2 = with("every:2");
  auto activations = [](const json& d) { return d["memory"][0]["activation_bytes"].get<std::int64_t>(); };
  const std::int64_t inputs = 4 * std::int64_t{4 * 32 * 128 * 4};
  // Full: the blocks' inputs, with the embeddings', the last LayerNorm's and the loss's own (the
  // root's, not checkpointed): far below what the blocks kept inside them.
  EXPECT_GE(activations(full), inputs);
  EXPECT_LT(activations(full) * 4, activations(none)) << "full " << activations(full) << " against none " << activations(none);
  EXPECT_GT(activations(every2), activations(full));
  EXPECT_LT(activations(every2), activations(none));
  // The step's extra forward is the recompute phase, apart from backward; none without checkpointing.
  EXPECT_FALSE(none["phases_ms"].contains("recompute")) << none["phases_ms"].dump();
  EXPECT_GT(full["phases_ms"]["recompute"].get<double>(), 0) << full["phases_ms"].dump();
  EXPECT_GT(every2["phases_ms"]["recompute"].get<double>(), 0);
  // The losses it trains to are the plain run's: checkpointing changes memory, not the function (the
  // parity pass compares a strategy with single checkpointed alike, so it cannot see this).
  for (const json* d : {&full, &every2}) {
    EXPECT_DOUBLE_EQ((*d)["first_loss"].get<double>(), none["first_loss"].get<double>());
    EXPECT_DOUBLE_EQ((*d)["final_loss"].get<double>(), none["final_loss"].get<double>());
  }
}

}  // namespace
}  // namespace ddpbench
