#include "models/scripted_workload.h"

#include <torch/csrc/jit/api/module.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/nn/functional/loss.h>
#include <torch/optim/sgd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>
#include <unordered_set>

#include "base/errors.h"
#include "compat/torch_compat.h"
#include "models/model_spec.h"
#include "models/scripted_units.h"
#include "optim/optimizers.h"
#include "workloads/workload.h"

namespace ddpbench {

namespace {

// A deep copy whose tensors are leaves: Module::deepcopy() clones them, and a clone taken with
// gradients on is a non-leaf that no optimizer may update.
torch::jit::Module leaf_copy(const torch::jit::Module& module) {
  torch::NoGradGuard no_grad;
  return module.deepcopy();
}

std::string shape_text(c10::IntArrayRef sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// A TorchScript module whose parameters and buffers are registered, as the same tensors, with the
// torch::nn::Module base: what the harness does to them (to(device), set_data into shared memory,
// float64 for the parity pass, gradient hooks) the module's forward sees. nn::Module names cannot
// hold dots, so "layer1.0.conv1.weight" is registered as "layer1_0_conv1_weight" (a clash throws).
// Its wrap units are the submodules `units` names (models/scripted_units.h); under hooks (fsdp) its
// forward is the copy of the module's that calls them around each unit.
class ScriptedModel final : public WorkloadModel {
 public:
  // `frozen`: the module's names of the parameters it trains frozen (a deep copy loses requires_grad,
  // so the workload reads them once from the file as loaded).
  ScriptedModel(torch::jit::Module module, std::shared_ptr<const ScriptedUnits> units,
                std::shared_ptr<const std::set<std::string>> frozen = nullptr)
      : module_(std::move(module)), units_(std::move(units)), frozen_(std::move(frozen)) {
    std::map<std::string, std::string> originals;  // flat name -> the module's name, to name a clash
    const auto unique = [&](const std::string& name) {
      const auto [it, fresh] = originals.emplace(flat(name), name);
      if (!fresh) {
        throw UsageError("--model: the model's tensors '" + it->second + "' and '" + name + "' would both be named '" +
                         it->first + "' (ddpbench writes '.' as '_'): rename one");
      }
      return it->first;
    };
    // A tensor the module holds under two names (a tied weight: `head.weight = embed.weight`) is
    // registered once, under its first name, as PyTorch's named_parameters() lists it: TorchScript's
    // lists it under each name.
    std::unordered_set<const void*> registered;
    const auto first_time = [&registered](const torch::Tensor& t) { return registered.insert(t.unsafeGetTensorImpl()).second; };
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      const bool trained = frozen_ == nullptr || frozen_->count(p.name) == 0;
      if (first_time(p.value)) register_parameter(unique(p.name), p.value, trained);
    }
    for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
      if (first_time(b.value)) register_buffer(unique(b.name), b.value);
    }
    module_.train(is_training());
  }
  torch::Tensor forward(const torch::Tensor& input) override {
    if (UnitCallHooks* hooks = unit_hooks(); hooks != nullptr && units_->forward) {
      return forward_in_units(*units_, module_, input, *hooks);
    }
    auto output = module_.forward({input});
    if (!output.isTensor()) {
      throw CaseFailure("--model: the model's forward returned " + std::string(output.tagKind()) + ", not one tensor");
    }
    return output.toTensor();
  }
  ModelPtr fresh_instance() const override { return std::make_shared<ScriptedModel>(leaf_copy(module_), units_, frozen_); }
  std::vector<WrapUnit> wrap_units() override {
    std::vector<WrapUnit> units;
    for (const auto& path : units_->paths) units.push_back({path, unit_parameters(module_, path)});
    return units;
  }
  void train(bool on) override {
    torch::nn::Module::train(on);
    module_.train(on);
  }
  std::size_t chain_length() const override { return units_->chain.size(); }
  std::string chain_refusal() const override { return units_->chain_refusal; }

 protected:
  // A chain's links hold no parameters outside its units (find_chain): the head has none.
  torch::Tensor chain_head(const torch::Tensor& input) override { return through(units_->chain_head, input); }
  torch::Tensor chain_unit(std::size_t unit, const torch::Tensor& hidden) override { return through(units_->chain.at(unit), hidden); }

 private:
  torch::Tensor through(const std::vector<std::string>& paths, torch::Tensor x) const {
    for (const auto& path : paths) x = call_submodule(module_, path, x);
    return x;
  }
  static std::string flat(std::string name) {
    for (auto& c : name) c = c == '.' ? '_' : c;
    return name;
  }
  torch::jit::Module module_;
  std::shared_ptr<const ScriptedUnits> units_;  // the workload's, shared by every copy
  std::shared_ptr<const std::set<std::string>> frozen_;  // likewise; null: none
};

// Hooks that do nothing: the unit-split forward's trial run.
class PassingHooks final : public UnitCallHooks {
 public:
  void before_unit(std::size_t) override {}
  torch::Tensor after_unit(std::size_t, torch::Tensor output) override { return output; }
};

class ScriptedWorkload final : public Workload {
 public:
  ScriptedWorkload(ModelSource source, ModelSpec spec, torch::jit::Module module)
      : source_(std::move(source)), spec_(std::move(spec)), module_(std::move(module)) {
    for (const auto& m : module_.named_modules()) {
      const auto type = m.value.type()->name();
      batch_norm_ = batch_norm_ || (type && type->name().find("BatchNorm") != std::string::npos);
    }
    check_against_model();
  }

  const ModelSource& source() const { return source_; }
  std::string name() const override { return spec_.name; }
  std::string description() const override {
    return "TorchScript " + source_.path + ": " + spec_.summary() + " (batch " + std::to_string(spec_.global_batch) +
           ")" + frozen_note_ + "; " + units_->summary();
  }
  std::int64_t default_global_batch() const override { return spec_.global_batch; }
  ModelPtr make_model() const override { return std::make_shared<ScriptedModel>(leaf_copy(module_), units_, frozen_); }

  Dataset make_dataset(std::int64_t size, std::uint64_t seed) const override {
    const std::int64_t tokens = spec_.input_shape.empty() ? 0 : spec_.input_shape[0];
    if (spec_.target == ModelSpec::Target::NextToken) return next_token_dataset(size, seed, spec_.vocab, tokens);
    auto gen = compat::make_cpu_generator(seed);
    Dataset d;
    if (spec_.input == ModelSpec::Input::Float) {
      d.inputs = torch::randn(with_batch(size, spec_.input_shape), gen, torch::kFloat32);
    } else {
      d.inputs = torch::randint(0, spec_.vocab, {size, tokens}, gen, torch::kInt64);
    }
    if (spec_.target == ModelSpec::Target::Class) {
      d.targets = torch::randint(0, spec_.classes, {size}, gen, torch::kInt64);
    } else {
      d.targets = torch::randn(with_batch(size, output_shape_), gen, torch::kFloat32);
    }
    return d;
  }

  std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters) const override {
    if (spec_.optimizer == ModelSpec::Optimizer::AdamW) {
      return make_adamw(std::move(parameters), torch::optim::AdamWOptions(spec_.lr).weight_decay(spec_.weight_decay));
    }
    return make_sgd(std::move(parameters),
                    torch::optim::SGDOptions(spec_.lr).momentum(spec_.momentum).weight_decay(spec_.weight_decay));
  }
  // As transformer's: AdamW's division by the root of its second moment turns the rounding noise of
  // a different summation order into parameter differences, so parity checks gradients under SGD.
  std::unique_ptr<torch::optim::Optimizer> make_parity_optimizer(std::vector<torch::Tensor> parameters) const override {
    if (spec_.optimizer == ModelSpec::Optimizer::AdamW) return Workload::make_optimizer(std::move(parameters));
    return make_optimizer(std::move(parameters));
  }

  torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) const override {
    if (spec_.loss == ModelSpec::Loss::CrossEntropy) return cross_entropy(output, target);
    // In fp32 at least, as cross_entropy: a bf16 output's squared error would lose the small terms.
    const bool wide = output.scalar_type() == torch::kFloat || output.scalar_type() == torch::kDouble;
    const auto prediction = wide ? output : output.to(torch::kFloat);
    return torch::nn::functional::mse_loss(prediction, target.to(prediction.scalar_type()));
  }
  double flops_per_sample() const override { return spec_.flops_per_sample; }
  bool has_batch_norm() const override { return batch_norm_; }
  bool converts_to_sync_batch_norm() const override { return false; }

 private:
  static std::vector<std::int64_t> with_batch(std::int64_t batch, const std::vector<std::int64_t>& sample) {
    std::vector<std::int64_t> shape{batch};
    shape.insert(shape.end(), sample.begin(), sample.end());
    return shape;
  }

  // One forward pass on two samples: the model takes the input, and its output fits the target.
  void check_against_model() {
    const std::string where = "--model: " + source_.path + ": ";
    std::int64_t parameters = 0, trainable = 0;
    auto frozen = std::make_shared<std::set<std::string>>();
    for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
      parameters += p.value.numel();
      if (p.value.requires_grad() || spec_.train_frozen) {
        trainable += p.value.numel();
      } else {
        frozen->insert(p.name);
      }
    }
    if (parameters == 0) throw UsageError(where + "the model has no parameters to train");
    if (trainable == 0) {
      throw UsageError(where + "every parameter is frozen (saved with requires_grad False): nothing to train; "
                               "--model-set frozen=train trains them all");
    }
    if (!frozen->empty()) {
      frozen_note_ = "; " + std::to_string(parameters - trainable) + " of " + std::to_string(parameters) +
                     " parameters frozen (requires_grad False: no gradient, optimizer state or traffic)";
      frozen_ = std::move(frozen);
    }
    torch::NoGradGuard no_grad;
    auto trial = ScriptedModel(leaf_copy(module_), std::make_shared<ScriptedUnits>());
    // The same trial batch in every process: each rank and worker decides the wrap units again from
    // it (checked_units), and ranks that decided differently would post different collectives.
    auto gen = compat::make_cpu_generator(0x5eed);
    torch::Tensor inputs = spec_.input == ModelSpec::Input::Float
                               ? torch::randn(with_batch(2, spec_.input_shape), gen)
                               : torch::randint(0, spec_.vocab, {2, spec_.input_shape[0]}, gen, torch::kInt64);
    torch::Tensor output;
    try {
      output = trial.forward(inputs);
    } catch (const CaseFailure& e) {
      throw UsageError(where + std::string(e.what()).substr(std::strlen("--model: ")));
    } catch (const c10::Error& e) {
      throw UsageError(where + "the model rejects 'input' " + spec_.settings().at("input") + " (a batch of shape " +
                       shape_text(inputs.sizes()) + "): " + telling_line(e.what_without_backtrace()));
    } catch (const std::exception& e) {  // the interpreter's JITException
      throw UsageError(where + "the model rejects 'input' " + spec_.settings().at("input") + " (a batch of shape " +
                       shape_text(inputs.sizes()) + "): " + telling_line(e.what()));
    }
    const auto sizes = output.sizes();
    const auto fail = [&](const std::string& expected) {
      throw UsageError(where + "its output " + shape_text(sizes) + " does not fit 'target' " +
                       spec_.settings().at("target") + " (expected " + expected + ")");
    };
    switch (spec_.target) {
      case ModelSpec::Target::Class:
        if (sizes.size() != 2 || sizes[0] != 2 || sizes[1] != spec_.classes) {
          fail("[batch, " + std::to_string(spec_.classes) + "] logits");
        }
        break;
      case ModelSpec::Target::NextToken:
        if (sizes.size() != 3 || sizes[0] != 2 || sizes[1] != spec_.input_shape[0] || sizes[2] != spec_.vocab) {
          fail("[batch, " + std::to_string(spec_.input_shape[0]) + ", " + std::to_string(spec_.vocab) + "] logits");
        }
        break;
      case ModelSpec::Target::Regression:
        if (sizes.empty() || sizes[0] != 2 || !output.is_floating_point()) fail("a floating-point [batch, ...] tensor");
        output_shape_.assign(sizes.begin() + 1, sizes.end());
        break;
    }
    units_ = checked_units(inputs);
  }

  // The wrap units, where the unit-split forward computes exactly what forward does on the trial
  // batch (both in eval mode, so dropout draws nothing); a split that fails or differs leaves the
  // model one unit, and the reason says so.
  std::shared_ptr<const ScriptedUnits> checked_units(const torch::Tensor& inputs) const {
    auto units = std::make_shared<ScriptedUnits>();
    try {
      *units = plan_scripted_units(module_);
    } catch (const std::exception& e) {
      units->reason = "forward could not be read: " + telling_line(e.what());
      units->chain_refusal = units->reason;
      return units;
    }
    if (!units->forward) return units;
    try {
      ScriptedModel whole(leaf_copy(module_), std::make_shared<ScriptedUnits>());
      ScriptedModel split(leaf_copy(module_), units);
      PassingHooks hooks;
      split.set_unit_hooks(&hooks);
      whole.eval();
      split.eval();
      const auto expected = whole.forward(inputs);
      if (torch::equal(expected, split.forward(inputs))) {
        if (!units->chain.empty() && !torch::equal(expected, split.forward_range(inputs, 0, units->chain.size()))) {
          units->chain.clear();
          units->chain_head.clear();
          units->chain_refusal = "its submodules called in turn computed another output than forward";
        }
        return units;
      }
      units->reason = "forward split at its submodule calls computed another output";
    } catch (const std::exception& e) {
      units->reason = "forward split at its submodule calls failed: " + telling_line(e.what());
    }
    units->paths.clear();
    units->forward.reset();
    units->chain.clear();
    units->chain_head.clear();
    units->chain_refusal = "it is one wrap unit (" + units->reason + ")";
    return units;
  }

  ModelSource source_;
  ModelSpec spec_;
  torch::jit::Module module_;  // as loaded, on the CPU: every model is a deep copy of it
  std::vector<std::int64_t> output_shape_;  // one sample's output, for regression targets
  std::shared_ptr<const ScriptedUnits> units_;
  std::shared_ptr<const std::set<std::string>> frozen_;  // parameters kept frozen (frozen=keep); null: none
  std::string frozen_note_;                               // for the description
  bool batch_norm_ = false;
};

}  // namespace

std::string sidecar_path(const std::string& model_path) {
  const auto slash = model_path.find_last_of('/');
  const auto dot = model_path.find_last_of('.');
  const bool has_extension = dot != std::string::npos && (slash == std::string::npos || dot > slash + 1);
  return (has_extension ? model_path.substr(0, dot) : model_path) + ".json";
}

ModelSource register_scripted_model(const std::string& path, const std::vector<std::string>& overrides,
                                    bool read_sidecar) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw UsageError("--model: cannot read " + path + ": " + std::strerror(errno));
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, torch::Device(torch::kCPU));
  } catch (const c10::Error& e) {
    throw UsageError("--model: " + path + " is not a TorchScript module this LibTorch (" + compat::torch_version() +
                     ") can load: " + first_line(e.what_without_backtrace()));
  } catch (const std::exception& e) {
    throw UsageError("--model: " + path + " is not a TorchScript module: " + first_line(e.what()));
  }

  ModelSource source{path, {}};
  const std::string sidecar = sidecar_path(path);
  const bool has_sidecar = read_sidecar && static_cast<bool>(std::ifstream(sidecar));
  if (has_sidecar) source.settings = read_model_sidecar(sidecar);
  for (const auto& o : overrides) apply_model_setting(o, source.settings);
  const auto slash = path.find_last_of('/');
  const std::string file = path.substr(slash == std::string::npos ? 0 : slash + 1);
  const auto dot = file.find_last_of('.');
  const std::string stem = dot == std::string::npos || dot == 0 ? file : file.substr(0, dot);
  const std::string described = !read_sidecar ? "the launcher's settings"
                                : has_sidecar ? (overrides.empty() ? sidecar : sidecar + " and --model-set")
                                              : (overrides.empty() ? "no sidecar " + sidecar : "--model-set (no sidecar " + sidecar + ")");
  ModelSpec spec = parse_model_spec(source.settings, stem, described);
  source.settings = spec.settings();

  auto& registry = WorkloadRegistry::instance();
  if (registry.contains(spec.name)) {
    const auto* earlier = dynamic_cast<const ScriptedWorkload*>(&registry.get(spec.name));
    if (earlier == nullptr) {
      throw UsageError("--model: the name '" + spec.name + "' is a built-in workload's: set another with --model-set name=NAME");
    }
    if (earlier->source() == source) return source;  // this process loaded it already
  }
  registry.put(std::make_unique<ScriptedWorkload>(source, std::move(spec), std::move(module)));
  return source;
}

}  // namespace ddpbench
