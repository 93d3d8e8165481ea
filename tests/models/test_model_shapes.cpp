// The user's own model where it is not shaped like ours, under every strategy: a tensor registered
// under two names (a tied weight, a shared submodule) is one parameter; parameters saved frozen get
// no gradient, optimizer state or traffic; a parameter no rank uses is left alone (not decayed);
// a unit of two dtypes is refused by fsdp in one line. test_reference_loop.cpp holds `single` itself
// to PyTorch's loop on the same shapes.
#include <gtest/gtest.h>

#include "compat/c10d_compat.h"
#include "strategies/strategy.h"
#include "tests/models/exported_models.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::exported_model;
using testing::flags_with;
using testing::kSmallShapeFlags;
using testing::run_process;
using testing::ScratchDir;

// Every strategy at world 2 on `model`, a few steps: the cases by name.
std::map<std::string, json> run_all(const std::string& model, const std::string& json_path,
                                    std::vector<std::string> extra = {}) {
  extra.insert(extra.end(), {"--model", model});
  const auto r = run_process(testing::ddpbench_run({{"--device", "cpu"}, {"--world-size", "2"}, {"--steps", "2"},
                                                    {"--warmup", "1"}, {"--repetitions", "1"}, {"--parity-steps", "2"},
                                                    {"--strategy", "all"}},
                                                   json_path, extra));
  EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err << r.out;
  std::map<std::string, json> out;
  const json doc = json::parse(testing::read_text(json_path));
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_type"] == "iteration") out.emplace(b["ddpbench"]["strategy"].get<std::string>(), b["ddpbench"]);
  }
  return out;
}

void expect_ok_and_at_parity(const std::map<std::string, json>& cases) {
  ASSERT_EQ(cases.size(), StrategyRegistry::instance().names().size());
  for (const auto& [strategy, c] : cases) {
    SCOPED_TRACE(strategy);
    if (testing::skipped_as_unsplittable(c)) continue;
    ASSERT_EQ(c["status"], "ok") << c["reason"];
    if (c["parity"]["compared_by"] == "parameters") {
      EXPECT_LE(c["parity"]["max_rel_param_diff"].get<double>(), c["parity"]["tolerance"].get<double>());
    }
  }
}

std::int64_t memory_of(const json& c, const char* kind) { return c["memory"][0][kind].get<std::int64_t>(); }

TEST(ModelShapes, ATensorUnderTwoNamesIsOneParameterUnderEveryStrategy) {
  struct Shape {
    std::string factory;
    std::vector<std::string> flags;
    std::int64_t parameters;  // as PyTorch counts them: each tensor once
    int fsdp_groups;          // fsdp's communication groups: its units with parameters, and the root
  };
  const std::vector<Shape> shapes = {
      // embed (32x16, tied with head) + mix (16x16 + 16): the tied weight is the root's, mix one unit.
      {"tied_embedding", {"--input", "tokens:8", "--vocab", "32", "--next-token", "--batch", "8"}, 32 * 16 + 16 * 16 + 16, 2},
      // inp, block (== again), head: 72 + 72 + 36; block's weights, named by two units, are the root's.
      {"shared_submodule", kSmallShapeFlags, 72 + 72 + 36, 3},
  };
  for (const auto& s : shapes) {
    SCOPED_TRACE(s.factory);
    ScratchDir dir;
    const auto cases = run_all(exported_model("shapes-" + s.factory, s.factory, s.flags), dir.file("r.json"));
    expect_ok_and_at_parity(cases);
    for (const auto& [strategy, c] : cases) {
      SCOPED_TRACE(strategy);
      if (testing::skipped_as_unsplittable(c)) continue;
      EXPECT_EQ(c["workload_facts"]["parameters"].get<std::int64_t>(), s.parameters);
      EXPECT_EQ(c["workload_facts"]["gradient_bytes"].get<std::int64_t>(), 4 * s.parameters);
    }
    const json& single = cases.at("single");
    EXPECT_EQ(memory_of(single, "parameter_bytes"), 4 * s.parameters);
    EXPECT_EQ(memory_of(single, "gradient_bytes"), 4 * s.parameters);
    EXPECT_EQ(memory_of(single, "optimizer_state_bytes"), 4 * s.parameters) << "one momentum buffer per tensor";
    EXPECT_EQ(cases.at("ddp")["comm"]["bytes_per_step"].get<std::int64_t>(), 4 * s.parameters + 4) << "gradients and the loss";
    EXPECT_EQ(cases.at("fsdp")["comm"]["buckets"].get<int>(), s.fsdp_groups);
  }
}

TEST(ModelShapes, FrozenParametersGetNoGradientOptimizerStateOrTrafficUnlessAskedToTrain) {
  const std::string model =
      exported_model("shapes-frozen", "frozen_backbone", flags_with(kSmallShapeFlags, {"--weight-decay", "0.1"}));
  const std::int64_t all = 8 * 16 + 16 + 16 * 16 + 16 + 16 * 4 + 4, head = 16 * 4 + 4;
  for (const bool train_frozen : {false, true}) {
    SCOPED_TRACE(train_frozen ? "frozen=train" : "frozen kept");
    ScratchDir dir;
    const auto cases = run_all(model, dir.file("r.json"), train_frozen ? std::vector<std::string>{"--model-set", "frozen=train"}
                                                                        : std::vector<std::string>{});
    expect_ok_and_at_parity(cases);
    const std::int64_t trained = train_frozen ? all : head;
    for (const auto& [strategy, c] : cases) {
      SCOPED_TRACE(strategy);
      if (testing::skipped_as_unsplittable(c)) continue;
      EXPECT_EQ(c["workload_facts"]["parameters"].get<std::int64_t>(), all);
      EXPECT_EQ(c["workload_facts"]["gradient_bytes"].get<std::int64_t>(), 4 * trained);
    }
    for (const char* strategy : {"single", "dp", "ddp"}) {
      SCOPED_TRACE(strategy);
      const json& c = cases.at(strategy);
      EXPECT_EQ(memory_of(c, "parameter_bytes"), 4 * all);
      EXPECT_EQ(memory_of(c, "gradient_bytes"), 4 * trained);
      EXPECT_EQ(memory_of(c, "optimizer_state_bytes"), 4 * trained);
    }
    EXPECT_EQ(cases.at("ddp")["comm"]["bytes_per_step"].get<std::int64_t>(), 4 * trained + 4);
    for (const char* strategy : {"zero1", "zero2", "fsdp"}) {
      SCOPED_TRACE(strategy);
      const auto padded = 4 * (trained + trained % 2);
      EXPECT_EQ(cases.at(strategy)["comm"]["reduce_scatter_bytes_per_step"].get<std::int64_t>(), padded);
      EXPECT_LE(memory_of(cases.at(strategy), "optimizer_state_bytes"), padded / 2 + 4) << "half the trained ones, each rank";
    }
  }
}

TEST(ModelShapes, AParameterNoRankUsesIsNotDecayedByAnyStrategy) {
  // SGD with weight decay, which parity trains with too: a zero-filled gradient would decay `unused`.
  ScratchDir dir;
  const auto cases = run_all(exported_model("shapes-unused", "unused_branch", flags_with(kSmallShapeFlags, {"--weight-decay", "0.1"})),
                             dir.file("r.json"));
  expect_ok_and_at_parity(cases);
}

TEST(ModelShapes, AUnitWhoseOutputIsDetachedRunsUnderFsdpWithItsParametersLeftAlone) {
  // Its backward never runs: the unit after it prefetched its gather for nothing (fsdp failed on
  // "freeing a unit whose all-gather is in flight"), and its parameters get no gradient, which
  // weight decay must not turn into a step.
  ScratchDir dir;
  const auto cases = run_all(exported_model("shapes-detached", "detached_auxiliary",
                                            flags_with(kSmallShapeFlags, {"--weight-decay", "0.1"})),
                             dir.file("r.json"), {"--strategy", "single,ddp,zero2,fsdp"});
  ASSERT_EQ(cases.size(), 4u);
  for (const auto& [strategy, c] : cases) {
    SCOPED_TRACE(strategy);
    if (testing::skipped_as_unsplittable(c)) continue;
    ASSERT_EQ(c["status"], "ok") << c["reason"];
    EXPECT_TRUE(c["parity"]["checked"].get<bool>());
    EXPECT_LE(c["parity"]["max_rel_param_diff"].get<double>(), c["parity"]["tolerance"].get<double>());
  }
}

TEST(ModelShapes, GruAndLstmAreWrapUnitsWithEveryTensorOfTheirTupleOutputsHooked) {
  // nn.GRU returns (output, h_n), nn.LSTM (output, (h_n, c_n)): once held whole with the root (85%
  // of a GRU model's parameters, so fsdp read like ddp). Each tensor of the tuple now carries the
  // unit's backward hook, so each unit is gathered again for its backward: twice a step.
  struct Shape {
    std::string factory, units;
    int groups;
  };
  for (const auto& s : {Shape{"gru_classifier", "2 submodules in forward's order: gru, head", 2},
                        Shape{"lstm_classifier", "3 submodules in forward's order: inp, lstm, head", 3}}) {
    SCOPED_TRACE(s.factory);
    ScratchDir dir;
    const std::string json_path = dir.file("r.json");
    const auto cases = run_all(exported_model("shapes-" + s.factory, s.factory, {"--input", "float:6x8", "--classes", "4", "--batch", "8"}),
                               json_path, {"--strategy", "single,fsdp"});
    ASSERT_EQ(cases.size(), 2u);
    const json doc = json::parse(testing::read_text(json_path));
    const std::string described = doc["context"]["ddpbench"]["settings"]["workloads"]["shapes-" + s.factory].get<std::string>();
    EXPECT_NE(described.find(s.units), std::string::npos) << described;
    const json& fsdp = cases.at("fsdp");
    ASSERT_EQ(fsdp["status"], "ok") << fsdp["reason"];
    EXPECT_LE(fsdp["parity"]["max_rel_param_diff"].get<double>(), fsdp["parity"]["tolerance"].get<double>());
    EXPECT_EQ(fsdp["comm"]["buckets"].get<int>(), s.groups);
    EXPECT_EQ(fsdp["comm"]["all_gather_bytes_per_step"].get<std::int64_t>(),
              2 * fsdp["comm"]["reduce_scatter_bytes_per_step"].get<std::int64_t>())
        << "every unit gathered for its forward and again for its backward";
  }
}

TEST(ModelShapes, WhereMoreThanAQuarterOfTheParametersStayWithFsdpsRootTheTableSaysSo) {
  // called_twice: `again` (20 of the 56 parameters) is applied twice, so it stays whole with the
  // root: 36%. mlp's units hold all of its parameters: no note for it.
  ScratchDir dir;
  const std::string model = exported_model("shapes-twice", "called_twice", kSmallShapeFlags);
  const auto r = run_process(testing::ddpbench_run({{"--device", "cpu"}, {"--world-size", "2"}, {"--steps", "1"}, {"--warmup", "0"},
                                                    {"--repetitions", "1"}, {"--parity-steps", "1"}},
                                                   dir.file("r.json"), {"--model", model, "--workload", "mlp,shapes-twice",
                                                                        "--strategy", "fsdp"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.out.find("shapes-twice/fsdp/world:2: 36% of the trained parameters stay whole with the root"), std::string::npos)
      << r.out;
  const std::string said = "of the trained parameters stay whole with the root";
  EXPECT_EQ(r.out.find(said), r.out.rfind(said)) << "one note, that model's: " << r.out;
}

TEST(ModelShapes, FsdpRefusesAUnitOfTwoDtypesInOneLineAndTheOthersTrainIt) {
  ScratchDir dir;
  const auto cases = run_all(exported_model("shapes-mixed", "mixed_dtype_unit", kSmallShapeFlags), dir.file("r.json"),
                             {"--strategy", "single,ddp,zero2,fsdp"});
  ASSERT_EQ(cases.size(), 4u);
  const json& fsdp = cases.at("fsdp");
  EXPECT_EQ(fsdp["status"], "failed");
  const std::string reason = fsdp["reason"].get<std::string>();
  EXPECT_NE(reason.find("fsdp: wrap unit 'block' holds float"), std::string::npos) << reason;
  EXPECT_NE(reason.find("float32"), std::string::npos) << reason;
  EXPECT_NE(reason.find("float64"), std::string::npos) << reason;
  EXPECT_EQ(reason.find('\n'), std::string::npos) << reason;
  for (const char* strategy : {"single", "ddp", "zero2"}) {
    SCOPED_TRACE(strategy);
    EXPECT_EQ(cases.at(strategy)["status"], "ok") << cases.at(strategy)["reason"];
  }
}

TEST(ModelShapes, BuffersAndParametersOfOtherDtypesRunUnderEveryStrategyOrSayWhyInOneLine) {
  ScratchDir dir;
  // A bool mask, an int64 index and a float64 scale among the buffers; a parameter of no elements.
  for (const std::string factory : {"buffers_of_several_dtypes", "empty_parameter"}) {
    SCOPED_TRACE(factory);
    expect_ok_and_at_parity(run_all(exported_model("shapes-" + factory, factory, kSmallShapeFlags), dir.file(factory + ".json")));
  }
  // A bfloat16 parameter: ddp reduces it in float32 where Gloo cannot send bfloat16 (LibTorch
  // 1.13); the sharded strategies send it as it is where they can, and say so where they cannot.
  const auto cases = run_all(exported_model("shapes-bf16", "bf16_parameter", kSmallShapeFlags), dir.file("bf16.json"));
  ASSERT_EQ(cases.size(), StrategyRegistry::instance().names().size());
  for (const auto& [strategy, c] : cases) {
    SCOPED_TRACE(strategy);
    if (testing::skipped_as_unsplittable(c)) continue;
    const bool sharded = strategy == "zero1" || strategy == "zero2" || strategy == "fsdp";
    if (sharded && !compat::gloo_sends_bf16()) {
      EXPECT_EQ(c["status"], "failed");
      EXPECT_NE(c["reason"].get<std::string>().find("cannot send bf16"), std::string::npos) << c["reason"];
    } else {
      EXPECT_EQ(c["status"], "ok") << c["reason"];
    }
  }
}

TEST(ModelShapes, AModelTheFloat64ParityPassCannotTrainIsMeasuredWithParityCannotTell) {
  ScratchDir dir;
  const std::string json_path = dir.file("r.json");
  const auto cases = run_all(exported_model("shapes-casts", "casts_internally", kSmallShapeFlags), json_path);
  ASSERT_EQ(cases.size(), StrategyRegistry::instance().names().size());
  for (const auto& [strategy, c] : cases) {
    SCOPED_TRACE(strategy);
    if (testing::skipped_as_unsplittable(c)) continue;
    ASSERT_EQ(c["status"], "ok") << c["reason"];
    if (strategy == "hogwild") continue;  // compared by loss, in the dtype it is measured in
    EXPECT_FALSE(c["parity"]["checked"].get<bool>());
    const std::string note = c["parity"]["note"].get<std::string>();
    EXPECT_NE(note.find("float64 parity pass cannot train this model"), std::string::npos) << note;
    EXPECT_NE(note.find("must have the same dtype"), std::string::npos) << "the model's own error, its telling line: " << note;
  }
}

}  // namespace
}  // namespace ddpbench
