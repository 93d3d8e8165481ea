// Workloads from outside the executable: TorchScript models exported by this leg's own Debian
// torch/torchvision through scripts/ddpbench-export (--model, --model-set, the sidecar), and the
// example plug-in library (--workload-lib), run by the real ddpbench binary under every strategy.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "base/errors.h"
#include "models/model_spec.h"
#include "models/scripted_workload.h"
#include "models/workload_sources.h"
#include "strategies/strategy.h"
#include "tests/models/exported_models.h"
#include "tests/support/test_support.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

using testing::run_process;
using testing::ScratchDir;
using testing::exported_model;

// 16x16 images, batch 4: every layer still runs (layer4 at 1x1, as the BatchNorm variant below);
// at 32x32 and batch 8 its run under every strategy took 46 s of a CTest on the 2-core VM.
std::string resnet18_groupnorm() {
  return exported_model("resnet18gn", "resnet18_groupnorm",
                        {"--input", "float:3x16x16", "--classes", "10", "--batch", "4", "--lr", "0.01"});
}
std::string tiny_mlp() { return exported_model("tiny", "tiny_mlp", {"--input", "float:16", "--classes", "4", "--batch", "8"}); }

nlohmann::json read_json(const std::string& path) { return nlohmann::json::parse(testing::read_text(path)); }

// Every case of `doc` by its name.
std::map<std::string, nlohmann::json> cases_of(const nlohmann::json& doc) {
  std::map<std::string, nlohmann::json> out;
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_type"] == "aggregate") continue;
    out.emplace(b["run_name"].get<std::string>(), b);
  }
  return out;
}

std::vector<std::string> quick_run(const std::string& json, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--world-size", "2"}, {"--steps", "2"}, {"--warmup", "1"},
                                {"--repetitions", "2"}, {"--parity-steps", "2"}},
                               json, std::move(extra));
}

// ---- the spec: sidecar keys and --model-set -------------------------------------------------

TEST(ModelSpec, DefaultsFollowTheTargetAndSettingsRoundTrip) {
  const auto spec = parse_model_spec({{"input", "float:3x8x8"}, {"target", "class:10"}}, "m", "test");
  EXPECT_EQ(spec.name, "m");
  EXPECT_EQ(spec.input_shape, (std::vector<std::int64_t>{3, 8, 8}));
  EXPECT_EQ(spec.loss, ModelSpec::Loss::CrossEntropy);
  EXPECT_EQ(spec.optimizer, ModelSpec::Optimizer::Sgd);
  EXPECT_EQ(spec.global_batch, 32);
  const auto regression = parse_model_spec({{"input", "float:4"}, {"target", "regression"}, {"optimizer", "adamw"}}, "r", "t");
  EXPECT_EQ(regression.loss, ModelSpec::Loss::Mse);
  EXPECT_DOUBLE_EQ(regression.lr, 1e-3);
  EXPECT_DOUBLE_EQ(regression.weight_decay, 0.01);
  // settings() is the spec: parsing it back gives every field again.
  for (const auto& s : {spec, regression}) {
    const auto again = parse_model_spec(s.settings(), "other", "t");
    EXPECT_EQ(again.settings(), s.settings());
    EXPECT_EQ(again.name, s.name);
  }
}

TEST(ModelSpec, EveryBadSettingNamesItsKey) {
  const std::map<std::string, std::string> good = {{"input", "tokens:8"}, {"vocab", "50"}, {"target", "next-token"}};
  struct Bad {
    std::string key, value, expected;
  };
  const std::vector<Bad> bad = {
      {"input", "image:3x8x8", "'input' must be float:SHAPE or tokens:LENGTH"},
      {"input", "tokens:8x2", "'input' tokens:LENGTH takes one length"},
      {"input", "float:3x0", "'input' has a bad shape"},
      {"input", "float:3x", "'input' has a bad shape"},
      {"vocab", "1", "'vocab' must be at least 2"},
      {"vocab", "5.5", "'vocab' must be a whole number"},
      {"target", "class:x", "'target' is not a number"},
      {"target", "classify", "'target' must be class:N"},
      // The reader of N quotes it from a map made for it alone: it must outlive that map (issue 31).
      {"target", "class:99999999999999999999", "'target' must be a whole number, got 99999999999999999999"},
      {"loss", "mse", "'loss' mse needs a regression target"},
      {"loss", "hinge", "'loss' must be cross-entropy or mse"},
      {"optimizer", "lamb", "'optimizer' must be sgd or adamw"},
      {"lr", "0", "'lr' must be more than 0"},
      {"lr", " 1", "'lr' is not a number"},
      {"global_batch", "0", "'global_batch' must be at least 1"},
      {"name", "a/b", "'name' 'a/b' cannot name a workload"},
  };
  for (const auto& b : bad) {
    SCOPED_TRACE(b.key + "=" + b.value);
    auto settings = good;
    settings[b.key] = b.value;
    try {
      parse_model_spec(settings, "m", "m.json");
      ADD_FAILURE() << "accepted";
    } catch (const UsageError& e) {
      EXPECT_NE(std::string(e.what()).find("--model: m.json: " + b.expected), std::string::npos) << e.what();
    }
  }
  EXPECT_THROW(parse_model_spec({{"target", "class:3"}}, "m", "t"), UsageError);  // no input
  EXPECT_THROW(parse_model_spec({{"input", "float:3"}, {"target", "next-token"}}, "m", "t"), UsageError);
  EXPECT_THROW(parse_model_spec({{"input", "tokens:3"}, {"target", "class:3"}}, "m", "t"), UsageError);  // no vocab
  std::map<std::string, std::string> settings;
  EXPECT_THROW(apply_model_setting("colour=blue", settings), UsageError);
  EXPECT_THROW(apply_model_setting("lr", settings), UsageError);
  EXPECT_THROW(apply_model_setting("lr=", settings), UsageError);
  apply_model_setting("lr=0.5", settings);
  EXPECT_EQ(settings.at("lr"), "0.5");
}

TEST(WorkloadSources, SurviveTheTripToRanksAndWorkers) {
  WorkloadSources sources;
  sources.libraries = {"/opt/a.so", "b c.so"};
  sources.model = ModelSource{"/data/m 1.pt", {{"input", "float:3x4"}, {"target", "class:2"}, {"lr", "0.25"}}};
  const auto back = WorkloadSources::from_json(sources.to_json());
  EXPECT_EQ(back.libraries, sources.libraries);
  ASSERT_TRUE(back.model.has_value());
  EXPECT_TRUE(*back.model == *sources.model);
  EXPECT_THROW(WorkloadSources::from_json("{\"model\": 1}"), std::runtime_error);
}

// ---- a TorchScript model in this process -------------------------------------------------

TEST(ScriptedModel, IsAWorkloadModelTheHarnessCanCloneConvertAndTrain) {
  const ModelSource source = register_scripted_model(tiny_mlp(), {"name=tiny-inproc"});
  const Workload& workload = WorkloadRegistry::instance().get("tiny-inproc");
  EXPECT_EQ(workload.default_global_batch(), 8);
  EXPECT_EQ(source.settings.at("target"), "class:4");
  EXPECT_EQ(workload.facts().parameters, 16 * 32 + 32 + 32 * 4 + 4);
  const Dataset data = workload.make_dataset(6, 7);
  EXPECT_EQ(data.inputs.sizes(), (std::vector<std::int64_t>{6, 16}));
  EXPECT_TRUE(torch::equal(data.targets, workload.make_dataset(6, 7).targets));

  auto model = workload.make_model();
  auto optimizer = workload.make_optimizer(model->parameters());
  const auto before = model->parameters()[0].clone();
  auto loss = workload.loss(model->forward(data.inputs), data.targets);
  loss.backward();
  optimizer->step();
  EXPECT_FALSE(torch::equal(before, model->parameters()[0])) << "a step must change the module's own weights";
  // Each model is a fresh copy of the file's weights, whatever an earlier one trained.
  EXPECT_TRUE(torch::equal(before, workload.make_model()->parameters()[0]));

  // The harness's clone and float64 conversion reach the module's forward.
  auto copy = clone_model(*model, torch::kCPU);
  EXPECT_TRUE(torch::equal(copy->forward(data.inputs), model->forward(data.inputs)));
  set_floating_dtype(*copy, torch::kDouble);
  EXPECT_EQ(copy->forward(data.inputs.to(torch::kDouble)).scalar_type(), torch::kDouble);
  copy->eval();
  EXPECT_FALSE(copy->is_training());
}

// ---- the real binary: every strategy, the ranks and the worker processes --------------------

TEST(ScriptedModel, RanksAndWorkersTrainWhatTheLauncherReadEvenIfTheSidecarChanges) {
  // The launcher resolves the spec once; its ranks and workers get it whole and read no sidecar.
  ScratchDir dir;
  const std::string model = dir.file("m.pt");
  {
    std::ifstream in(tiny_mlp(), std::ios::binary);
    std::ofstream(model, std::ios::binary) << in.rdbuf();
  }
  std::ofstream(dir.file("m.json")) << R"({"input": "float:16", "target": "class:4", "global_batch": 8})";
  ModelSource source = register_scripted_model(model, {"name=m-resolved"});
  std::ofstream(dir.file("m.json")) << R"({"benchmarks": []})";  // a later write over the sidecar
  WorkloadSources sources;
  sources.model = source;
  EXPECT_NO_THROW(install_workload_sources(WorkloadSources::from_json(sources.to_json())));
  EXPECT_EQ(WorkloadRegistry::instance().get("m-resolved").default_global_batch(), 8);
}

TEST(ScriptedModel, ResNet18UnderEveryStrategyMatchesSingle) {
  const std::string model = resnet18_groupnorm();
  ScratchDir dir;
  for (const std::string mode : {"threads", "processes"}) {
    SCOPED_TRACE(mode);
    const std::string json = dir.file(mode + ".json");
    const std::string traces = dir.file(mode + "-trace");
    // One repetition a case: what is checked here is the model under each strategy, not sampling.
    const auto r = run_process(quick_run(json, {"--model", model, "--strategy", mode == "threads" ? "all" : "hogwild",
                                                "--hogwild-mode", mode, "--trace", traces, "--repetitions", "1"}));
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const auto cases = cases_of(read_json(json));
    ASSERT_EQ(cases.size(), mode == "threads" ? StrategyRegistry::instance().names().size() : 1u);
    const auto trace = testing::read_trace(traces + "/ddpbench-rank0.json");
    for (const auto& [name, c] : cases) {
      SCOPED_TRACE(name);
      if (testing::skipped_as_unsplittable(c["ddpbench"])) continue;
      EXPECT_EQ(name.rfind("resnet18gn/", 0), 0u);
      // Timed steps and their phases, on the timeline as for a built-in workload.
      EXPECT_FALSE(trace.events_of(name, "step").empty());
      EXPECT_FALSE(trace.events_of(name, "forward").empty());
      if (mode == "threads") {
        EXPECT_GT(c["ddpbench"]["memory"][0]["peak_allocated_bytes"].get<double>(), 0);
      }
      if (name.find("/fsdp/") != std::string::npos) {
        EXPECT_EQ(c["ddpbench"]["comm"]["buckets"], 7) << "conv1, bn1, layer1 to layer4 and fc, each its own unit";
      }
      ASSERT_EQ(c["ddpbench"]["status"], "ok") << c.dump();
      const auto& parity = c["ddpbench"]["parity"];
      if (name.find("hogwild") != std::string::npos) {
        EXPECT_EQ(parity["compared_by"], "loss");
        EXPECT_TRUE(parity["final_loss"].is_number());
      } else {
        EXPECT_LE(parity["max_rel_param_diff"].get<double>(), parity["tolerance"].get<double>());
      }
    }
  }
}

TEST(ScriptedModel, NextTokenAndRegressionTargetsTrainUnderDdp) {
  const std::string tokens = exported_model("tokens", "next_token_model",
                                            {"--input", "tokens:8", "--vocab", "64", "--next-token", "--optimizer", "adamw"});
  const std::string regression = exported_model("regression", "regressor", {"--input", "float:8", "--regression"});
  ScratchDir dir;
  for (const auto& model : {tokens, regression}) {
    SCOPED_TRACE(model);
    const std::string json = dir.file("out.json");
    const auto r = run_process(quick_run(json, {"--model", model, "--strategy", "single,ddp", "--batch", "4"}));
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    for (const auto& [name, c] : cases_of(read_json(json))) {
      SCOPED_TRACE(name);
      ASSERT_EQ(c["ddpbench"]["status"], "ok") << c.dump();
      EXPECT_LE(c["ddpbench"]["parity"]["max_rel_param_diff"].get<double>(), c["ddpbench"]["parity"]["tolerance"].get<double>());
    }
  }
}

TEST(ScriptedModel, BatchNormGetsThePerDeviceStatisticsNoteAndNoSyncBn) {
  const std::string model = exported_model("resnet18bn", "resnet18", {"--input", "float:3x16x16", "--classes", "10", "--batch", "4"});
  const auto r = run_process(quick_run("", {"--model", model, "--strategy", "dp", "--steps", "1", "--repetitions", "1"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("BatchNorm statistics are computed per device"), std::string::npos) << r.out;
  const auto refused = run_process(quick_run("", {"--model", model, "--strategy", "ddp", "--sync-bn"}));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("--sync-bn: the BatchNorm layers of resnet18bn"), std::string::npos) << refused.err;
}

TEST(ScriptedModel, BadModelsAndSpecsExitTwoWithOneLineBeforeAnythingIsWritten) {
  ScratchDir dir;
  const std::string tiny = tiny_mlp();
  const std::string garbage = dir.file("garbage.pt");
  std::ofstream(garbage) << "not a zip archive";
  const std::string no_sidecar = dir.file("bare.pt");
  {
    std::ifstream in(tiny, std::ios::binary);
    std::ofstream(no_sidecar, std::ios::binary) << in.rdbuf();
  }
  const std::string bad_sidecar_model = dir.file("badside.pt");
  {
    std::ifstream in(tiny, std::ios::binary);
    std::ofstream(bad_sidecar_model, std::ios::binary) << in.rdbuf();
    std::ofstream(dir.file("badside.json")) << R"({"input": "float:16", "target": "class:4", "colour": "blue"})";
  }
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--model", dir.file("missing.pt")}, "--model: cannot read " + dir.file("missing.pt")},
      {{"--model", garbage}, "--model: " + garbage + " is not a TorchScript module"},
      {{"--model", no_sidecar}, "'input' is missing"},
      {{"--model", bad_sidecar_model}, "unknown key 'colour'"},
      {{"--model", tiny, "--model-set", "input=float:17"}, "the model rejects 'input' float:17"},
      {{"--model", tiny, "--model-set", "target=class:5"}, "its output [2, 4] does not fit 'target' class:5"},
      {{"--model", tiny, "--model-set", "input=tokens:16"}, "'vocab' is missing"},
      {{"--model", tiny, "--model-set", "size=3"}, "--model-set: unknown key 'size'"},
      {{"--model-set", "lr=0.1"}, "--model-set: needs --model PATH"},
      {{"--model", tiny, "--model-set", "name=mlp"}, "the name 'mlp' is a built-in workload's"},
      {{"--model", tiny, "--workload", "tiny,nope"}, "--workload: unknown name 'nope'"},
      {{"--workload-lib", dir.file("missing.so")}, "--workload-lib: cannot load " + dir.file("missing.so")},
      {{"--workload-lib", tiny}, "--workload-lib: cannot load " + tiny},
      {{"--model", exported_model("clash", "clashing_names", {"--input", "float:4", "--classes", "2"})},
       "tensors 'a.b_c' and 'a_b.c' would both be named 'a_b_c'"},
  };
  // The run never writes over what it reads: the results file named as the model's sidecar (or the
  // model itself) is refused, and the sidecar is left as it was.
  const std::string sidecar = sidecar_path(tiny);
  const std::string before = testing::read_text(sidecar);
  for (const auto& output : {sidecar, tiny}) {
    const auto r = run_process(quick_run(output, {"--model", tiny, "--strategy", "single"}));
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("--json: '" + output + "' is the file --model reads"), std::string::npos) << r.err;
  }
  EXPECT_EQ(testing::read_text(sidecar), before);
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expected);
    const std::string json = dir.file("results.json");
    auto flags = c.flags;
    const auto r = run_process(quick_run(json, flags));
    EXPECT_EQ(r.exit_code, 2) << r.err << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(c.expected), std::string::npos) << r.err;
    EXPECT_FALSE(testing::path_exists(json)) << "a refused run wrote its results file";
  }
}

// ---- wrap units: where a TorchScript model's forward is split for fsdp ----------------------

// Records the unit hooks' calls in the order a sharding strategy would get them.
class RecordingHooks final : public UnitCallHooks {
 public:
  std::vector<std::string> calls;
  void before_unit(std::size_t unit) override { calls.push_back("enter " + std::to_string(unit)); }
  torch::Tensor after_unit(std::size_t unit, torch::Tensor output) override {
    calls.push_back("leave " + std::to_string(unit));
    return output;
  }
};

std::string units_model(const std::string& factory) {
  return exported_model(factory, factory, {"--input", "float:8", "--classes", "4", "--batch", "8"});
}

TEST(ScriptedModel, ItsSubmoduleCallsAreWrapUnitsWhereGatheringEachAloneChangesNothing) {
  struct Case {
    std::string factory;
    std::vector<std::string> units;
    std::string said;  // in the workload's description, which the JSON carries
  };
  const std::vector<Case> cases = {
      {"layer_list", {"inp", "layers.0", "layers.1", "layers.2", "head"},
       "wrap units (fsdp): 5 submodules in forward's order: inp, layers.0, layers.1, layers.2, head"},
      {"tied_head", {"mid"}, "1 submodule in forward's order: mid; held whole with the root: inp (forward reads 'inp.weight' directly)"},
      {"called_twice", {"inp"}, "held whole with the root: again (forward calls it more than once)"},
      {"called_in_a_branch", {"inp"}, "held whole with the root: maybe (forward calls it inside a branch or a loop)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.factory);
    register_scripted_model(units_model(c.factory), {"name=units-" + c.factory});
    const Workload& workload = WorkloadRegistry::instance().get("units-" + c.factory);
    EXPECT_NE(workload.description().find(c.said), std::string::npos) << workload.description();
    auto model = workload.make_model();
    std::vector<std::string> names;
    std::size_t in_units = 0;
    for (const auto& unit : model->wrap_units()) {
      names.push_back(unit.name);
      in_units += unit.parameters.size();
    }
    EXPECT_EQ(names, c.units);
    EXPECT_LT(in_units, model->parameters().size()) << "every case keeps some parameters in the root";

    // With hooks installed, forward calls them around each unit, in order, and computes the same.
    const auto input = workload.make_dataset(4, 1).inputs;
    const auto expected = model->forward(input);
    RecordingHooks hooks;
    model->set_unit_hooks(&hooks);
    EXPECT_TRUE(torch::equal(model->forward(input), expected));
    std::vector<std::string> order;
    for (std::size_t k = 0; k < c.units.size(); ++k) {
      order.push_back("enter " + std::to_string(k));
      order.push_back("leave " + std::to_string(k));
    }
    EXPECT_EQ(hooks.calls, order);
    model->set_unit_hooks(nullptr);
  }
  // torchvision's ResNet: forward calls _forward_impl, whose submodule calls become forward's.
  register_scripted_model(resnet18_groupnorm(), {"name=units-resnet"});
  const auto resnet = WorkloadRegistry::instance().get("units-resnet").description();
  EXPECT_NE(resnet.find("7 submodules in forward's order: conv1, bn1, layer1, layer2, layer3, layer4, fc"), std::string::npos)
      << resnet;
}

// An exported nn.Sequential is a chain: each Linear a unit, the Tanh and Dropout after it in its
// link; pp cuts it and matches single in float64 at p = 2 and 3. A model whose forward does more
// than call its children in turn (a residual) is no chain, and pp says why, as it does for
// torchvision's ResNet (torch.flatten between avgpool and fc).
TEST(ScriptedModel, AnExportedSequentialIsAChainThatPpCuts) {
  register_scripted_model(units_model("sequential_chain"), {"name=chain-seq"});
  auto model = WorkloadRegistry::instance().get("chain-seq").make_model();
  ASSERT_EQ(model->chain_length(), 3u) << model->chain_refusal();
  const auto input = WorkloadRegistry::instance().get("chain-seq").make_dataset(4, 1).inputs;
  const auto whole = model->forward(input);
  auto hidden = model->forward_range(input, 0, 1);
  hidden = model->forward_range(hidden, 1, 3);
  EXPECT_TRUE(torch::equal(hidden, whole)) << "units [0, 1) then [1, 3) compute forward";
  EXPECT_EQ(model->forward_range(input, 0, 1).size(1), 32) << "unit 0 is the first Linear and its Tanh";

  register_scripted_model(units_model("not_a_chain"), {"name=chain-not"});
  const auto refused = WorkloadRegistry::instance().get("chain-not").make_model();
  EXPECT_EQ(refused->chain_length(), 0u);
  EXPECT_NE(refused->chain_refusal().find("forward passes 'a''s output to more than the next submodule"), std::string::npos)
      << refused->chain_refusal();

  register_scripted_model(resnet18_groupnorm(), {"name=chain-resnet"});
  const auto resnet = WorkloadRegistry::instance().get("chain-resnet").make_model();
  EXPECT_EQ(resnet->chain_length(), 0u);
  EXPECT_NE(resnet->chain_refusal().find("in turn, each on the one before's output (aten::flatten)"), std::string::npos)
      << resnet->chain_refusal();

  ScratchDir dir;
  const std::string chain = units_model("sequential_chain");
  for (const std::string world : {"2", "3"}) {
    SCOPED_TRACE(world);
    const std::string json = dir.file("w" + world + ".json");
    const auto r = run_process(quick_run(json, {"--model", chain, "--strategy", "pp", "--world-size", world}));
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const auto c = cases_of(read_json(json)).at("sequential_chain/pp/world:" + world)["ddpbench"];
    ASSERT_EQ(c["status"], "ok") << c.dump();
    EXPECT_EQ(c["parity"]["dtype"], "fp64");
    EXPECT_LE(c["parity"]["max_rel_param_diff"].get<double>(), 1e-9);
  }
  const std::string json = dir.file("not.json");
  const auto r = run_process(quick_run(json, {"--model", units_model("not_a_chain"), "--strategy", "pp"}));
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const auto c = cases_of(read_json(json)).at("not_a_chain/pp/world:2")["ddpbench"];
  EXPECT_EQ(c["status"], "skipped");
  EXPECT_NE(c["reason"].get<std::string>().find("(a residual or a skip connection)"), std::string::npos) << c["reason"];
}

TEST(ScriptedModel, FsdpGathersEachUnitAloneAndMatchesSingleAtWorldsTwoToFour) {
  ScratchDir dir;
  const std::string model = units_model("layer_list");
  for (const std::string world : {"2", "3", "4"}) {
    SCOPED_TRACE(world);
    const std::string json = dir.file("w" + world + ".json");
    const auto r = run_process(quick_run(json, {"--model", model, "--strategy", "single,fsdp", "--world-size", world}));
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const auto doc = read_json(json);
    EXPECT_NE(doc["context"]["ddpbench"]["settings"]["workloads"]["layer_list"].get<std::string>().find("5 submodules"), std::string::npos);
    const auto c = cases_of(doc).at("layer_list/fsdp/world:" + world)["ddpbench"];
    ASSERT_EQ(c["status"], "ok") << c.dump();
    EXPECT_EQ(c["comm"]["buckets"], 6) << "one communication group per unit, and the root's (its own parameter, scale)";
    EXPECT_LE(c["parity"]["max_rel_param_diff"].get<double>(), c["parity"]["tolerance"].get<double>());
  }
}

// ---- a plug-in library -------------------------------------------------------------------

TEST(WorkloadPlugin, TheExampleRunsUnderEveryStrategyInRanksAndWorkers) {
  ScratchDir dir;
  for (const std::string mode : {"threads", "processes"}) {
    SCOPED_TRACE(mode);
    const std::string json = dir.file(mode + ".json");
    const auto r = run_process(quick_run(json, {"--workload-lib", DDPBENCH_EXAMPLE_PLUGIN, "--workload", "swish-mlp",
                                                "--strategy", mode == "threads" ? "all" : "hogwild", "--hogwild-mode", mode}));
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    const auto cases = cases_of(read_json(json));
    ASSERT_EQ(cases.size(), mode == "threads" ? StrategyRegistry::instance().names().size() : 1u);
    for (const auto& [name, c] : cases) {
      SCOPED_TRACE(name);
      EXPECT_EQ(name.rfind("swish-mlp/", 0), 0u);  // pp too: the example declares its chain
      // tp: its residual block adds fc2's output to its whole input, so no column-row pair of
      // layers has only elementwise work between them, and it states no tensor-parallel plan.
      if (name.find("/tp/") != std::string::npos) {
        EXPECT_TRUE(testing::skipped_as_unsplittable(c["ddpbench"])) << c.dump();
        continue;
      }
      ASSERT_EQ(c["ddpbench"]["status"], "ok") << c.dump();
      const auto& parity = c["ddpbench"]["parity"];
      if (parity["compared_by"] != "loss") {
        EXPECT_LE(parity["max_rel_param_diff"].get<double>(), parity["tolerance"].get<double>());
      }
    }
  }
  // --list names the plug-in's workload with the built-in ones.
  const auto list = run_process(testing::ddpbench_args({"--workload-lib", DDPBENCH_EXAMPLE_PLUGIN, "--list"}));
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find("swish-mlp"), std::string::npos) << list.out;
}

TEST(WorkloadPlugin, ATakenNameOrAThrowingConstructorIsOneLineAndExitTwoNotAnAbort) {
  ScratchDir dir;
  const std::vector<std::pair<std::string, std::string>> plugins = {
      {DDPBENCH_PLUGIN_TAKES_A_TAKEN_NAME, "workload 'mlp' is registered already"},
      {DDPBENCH_PLUGIN_CONSTRUCTOR_THROWS, "no licence server answered"},
  };
  for (const auto& [plugin, expected] : plugins) {
    SCOPED_TRACE(plugin);
    const std::string json = dir.file("r.json");
    const auto r = run_process(quick_run(json, {"--workload-lib", plugin, "--strategy", "single"}));
    EXPECT_EQ(r.exit_code, 2) << r.err << r.out;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("--workload-lib: " + plugin + ": " + expected), std::string::npos) << r.err;
    EXPECT_FALSE(testing::path_exists(json)) << "a refused run wrote its results file";
  }
}

}  // namespace
}  // namespace ddpbench
