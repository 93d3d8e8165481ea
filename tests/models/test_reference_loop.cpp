// The reference check below parity: parity holds every strategy to `single`, so a defect `single`
// shares (a tied weight stepped twice, a frozen layer trained) is invisible to it. Here `single`, as
// the real ddpbench binary measures it, is held to PyTorch's own training loop (Python torch, the
// same version as this leg's LibTorch) on the same exported file, the same batches (assembled by
// ddpbench's own loader) and the same optimizer: each step's loss within 1e-6.
#include <gtest/gtest.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <cmath>
#include <fstream>

#include "models/scripted_workload.h"
#include "run/case_builder.h"
#include "tests/models/exported_models.h"
#include "tests/support/test_support.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

using testing::exported_model;
using testing::flags_with;
using testing::kSmallShapeFlags;
using testing::run_process;
using testing::ScratchDir;

constexpr int kSteps = 4;

// The batches of `single`'s first kSteps steps, from the loader a run of the binary builds with its
// defaults (seed, dataset size), written as torch.load reads them.
void write_batches(const std::string& workload_name, const std::string& path) {
  RunnerOptions options;
  DeviceSet devices(DeviceKind::Cpu, 1, 1);
  CaseBuilder builder(options, devices);
  const Workload& workload = WorkloadRegistry::instance().get(workload_name);
  const CaseSpec spec{workload_name, "single", 1, workload.default_global_batch()};
  auto strategy = builder.start_strategy(spec, training_optimizer(workload), kSteps, /*parity_run=*/false);
  const Dataset& dataset = builder.dataset_for(workload, spec.global_batch);
  BatchLoader loader = builder.make_loader(dataset, spec, *strategy);
  c10::List<torch::Tensor> inputs, targets;
  for (int i = 0; i < kSteps; ++i) {
    const Batch batch = loader.next();
    inputs.push_back(batch.inputs);
    targets.push_back(batch.targets);
  }
  c10::Dict<std::string, c10::List<torch::Tensor>> batches;
  batches.insert("inputs", inputs);
  batches.insert("targets", targets);
  const std::vector<char> bytes = torch::jit::pickle_save(c10::IValue(batches));
  std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

struct Shape {
  std::string factory;
  std::vector<std::string> export_flags;
  std::vector<std::string> model_set;  // --model-set for both loops (the settings reach Python resolved)
};

// A failure names the shape, not the parameter's bytes.
void PrintTo(const Shape& shape, std::ostream* out) { *out << shape.factory; }

class ReferenceLoop : public ::testing::TestWithParam<Shape> {};

TEST_P(ReferenceLoop, SinglesLossesEqualPyTorchsOwnLoopStepByStep) {
  const Shape& shape = GetParam();
  const std::string model = exported_model("reference-" + shape.factory, shape.factory, shape.export_flags);
  ScratchDir dir;

  std::vector<std::string> extra = {"--model", model, "--strategy", "single", "--warmup", "0", "--steps",
                                    std::to_string(kSteps), "--repetitions", "1", "--parity-steps", "1"};
  for (const auto& s : shape.model_set) extra.insert(extra.end(), {"--model-set", s});
  const std::string json = dir.file("single.json");
  const auto run = run_process(testing::ddpbench_run({{"--device", "cpu"}}, json, extra));
  ASSERT_EQ(run.exit_code, 0) << run.err << run.out;
  const auto doc = nlohmann::json::parse(testing::read_text(json));
  std::vector<double> ours;
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_type"] == "iteration") ours = b["ddpbench"]["loss_curve"]["loss"].get<std::vector<double>>();
  }
  ASSERT_EQ(ours.size(), static_cast<std::size_t>(kSteps)) << doc.dump();

  const ModelSource source = register_scripted_model(model, shape.model_set);
  const std::string batches = dir.file("batches.pt");
  write_batches(source.settings.at("name"), batches);
  const std::string settings = dir.file("settings.json");
  std::ofstream(settings) << nlohmann::json(source.settings).dump();
  const auto reference = run_process({testing::python(), std::string(DDPBENCH_SOURCE_DIR) + "/tests/models/reference_loop.py",
                                      model, batches, settings});
  ASSERT_EQ(reference.exit_code, 0) << reference.err;
  const auto theirs = nlohmann::json::parse(reference.out).get<std::vector<double>>();
  ASSERT_EQ(theirs.size(), ours.size());
  for (std::size_t i = 0; i < ours.size(); ++i) {
    EXPECT_NEAR(ours[i], theirs[i], 1e-6 * std::max(1.0, std::abs(theirs[i])))
        << "step " << i << ": ddpbench's single against PyTorch's loop";
  }
  EXPECT_NE(ours.front(), ours.back()) << "the model trained";
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, ReferenceLoop,
    ::testing::Values(
        Shape{"tiny_mlp", {"--input", "float:16", "--classes", "4", "--batch", "8", "--lr", "0.1"}, {}},
        Shape{"tied_embedding", {"--input", "tokens:8", "--vocab", "32", "--next-token", "--batch", "8", "--lr", "0.1"}, {}},
        Shape{"shared_submodule", kSmallShapeFlags, {}},
        Shape{"frozen_backbone", flags_with(kSmallShapeFlags, {"--weight-decay", "0.1"}), {}},
        Shape{"frozen_backbone", flags_with(kSmallShapeFlags, {"--weight-decay", "0.1"}), {"frozen=train", "name=frozen_trained"}},
        Shape{"unused_branch", flags_with(kSmallShapeFlags, {"--weight-decay", "0.1", "--optimizer", "adamw"}), {}},
        Shape{"buffers_of_several_dtypes", kSmallShapeFlags, {}},
        Shape{"called_twice", flags_with(kSmallShapeFlags, {"--optimizer", "adamw"}), {}}),
    [](const ::testing::TestParamInfo<Shape>& info) {
      return info.param.factory + (info.param.model_set.empty() ? "" : "_frozen_train");
    });

}  // namespace
}  // namespace ddpbench
