#pragma once
// A workload: a model, a loss, an optimizer and a deterministic synthetic dataset, defined once and
// run unchanged under every strategy (WORKLOADS.md). A workload registers itself by name.
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "workloads/activation_checkpointing.h"
#include "workloads/tensor_parallel_plan.h"

namespace ddpbench {

class WorkloadModel;
using ModelPtr = std::shared_ptr<WorkloadModel>;

// One wrap unit of a model: a name for the output ("h3", "stage2") and its parameters.
struct WrapUnit {
  std::string name;
  std::vector<torch::Tensor> parameters;
};

// What a strategy does around each wrap unit's call (LibTorch's C++ modules have no forward hooks):
// fsdp gathers the unit's parameters before it and frees them after, and arranges for them to be
// gathered again before the unit's backward. The workload never knows which strategy runs it.
class UnitCallHooks {
 public:
  virtual ~UnitCallHooks() = default;
  virtual void before_unit(std::size_t unit) = 0;
  // Returns the unit's output, possibly with an autograd hook attached.
  virtual torch::Tensor after_unit(std::size_t unit, torch::Tensor output) = 0;
};

// What every workload's model offers a strategy: a forward pass on a batch of inputs, and a fresh
// model of the same architecture to clone into. Models derive from torch::nn::Module alone, never
// from torch::nn::Cloneable: LibTorch 2.x derives Cloneable from Module non-virtually, so a second
// Module base would give two Module subobjects; cloning is clone_model's, the same on 1.x and 2.x.
class WorkloadModel : public torch::nn::Module {
 public:
  virtual torch::Tensor forward(const torch::Tensor& input) = 0;
  // A newly built model of the same architecture and configuration, on the CPU, with LibTorch's
  // default initialisation (it draws from the global generator, as Cloneable's reset() did).
  virtual ModelPtr fresh_instance() const = 0;

  // The model's wrap units (FSDP's auto-wrap policy made explicit): parts that a sharding strategy
  // gathers before it runs them and frees after, in the order forward calls them. forward runs unit
  // k's computation through call_unit(k, ...). Parameters in no unit belong to the root, held for the
  // whole step. Empty (the default): the whole model is the root, one unit.
  virtual std::vector<WrapUnit> wrap_units() { return {}; }
  // Each parameter (buffer) once, in registration order. LibTorch's parameters() lists a tensor once
  // per name it is registered under, so a tied weight (GPT-2's head reusing its embedding) or a
  // submodule registered twice would be stepped twice a step and counted twice; PyTorch's Python
  // lists it once, and so does every strategy that uses these.
  std::vector<torch::Tensor> distinct_parameters() const;
  std::vector<torch::Tensor> distinct_buffers() const;
  // The distinct parameters that require a gradient: what an optimizer steps and a strategy reduces.
  // A frozen one (requires_grad false: fine-tuning's frozen layers) gets no gradient, no optimizer
  // state and no traffic, as under PyTorch; it is still held, broadcast at the start and counted.
  std::vector<torch::Tensor> trainable_parameters() const;
  // The name each of distinct_parameters() has first (a tied weight: the name it was registered under first).
  std::vector<std::string> distinct_parameter_names() const;

  // Installed by the strategy that shards the model (fsdp), for as long as it runs it; nothing by
  // default, and then call_unit costs one null test.
  void set_unit_hooks(UnitCallHooks* hooks) { unit_hooks_ = hooks; }
  // --activation-checkpointing: the units its policy names keep only their inputs and recompute
  // their forward in backward (workloads/activation_checkpointing.h). Installed by Strategy::setup
  // on the model it is given and carried by clone_model to every replica; only units run through
  // call_unit (a chain's) are checkpointed, so a model that is no chain cannot take it. Null: none.
  void set_activation_checkpointing(std::shared_ptr<const ActivationCheckpointing> checkpointing) {
    checkpointing_ = std::move(checkpointing);
  }
  const std::shared_ptr<const ActivationCheckpointing>& activation_checkpointing() const { return checkpointing_; }

  // Megatron's tensor parallelism (workloads/tensor_parallel_plan.h): the layers a tp group splits,
  // each linear layer run through call_linear (a column layer's output reaching only elementwise
  // work before the row layer that takes it), each embedding through call_embedding and the output
  // layer with the loss through call_output_loss. Empty (the default): no plan, and
  // tensor_parallel_refusal() says why, for tp to refuse the model in one line.
  virtual std::vector<TensorParallelLayer> tensor_parallel_plan() { return {}; }
  virtual std::string tensor_parallel_refusal() const {
    return "it states no tensor-parallel plan (which linear layers split by columns, which by rows)";
  }
  // Installed by tp for as long as it runs the model; nothing by default, and then each call_ below
  // costs one null test. Public, for the submodules a model's forward runs (gpt2's blocks) to call.
  void set_layer_hooks(LayerCallHooks* hooks) { layer_hooks_ = hooks; }
  // x Wᵀ + b (layer.forward(x)), or what the installed hooks run in its place.
  torch::Tensor call_linear(torch::nn::LinearImpl& layer, const torch::Tensor& x);
  torch::Tensor call_linear(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x);
  // table.forward(ids), or what the installed hooks run in its place.
  torch::Tensor call_embedding(torch::nn::EmbeddingImpl& table, const torch::Tensor& ids);
  // The output layer (weight, bias: logits = hidden Wᵀ + b) and the loss against targets in one:
  // as_the_workload_computes(), or, under hooks that split the weight by vocabulary, the loss on
  // each rank's share of the logits.
  torch::Tensor call_output_loss(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& hidden,
                                 const torch::Tensor& targets, const std::function<torch::Tensor()>& as_the_workload_computes);
  // Where the hidden state enters the blocks (its sequence along `sequence_dim`): under tp's
  // --sequence-parallel it is each rank's share of the sequence from here until the output layer
  // (call_output_loss) gathers it, the blocks' column layers gathering it and their row layers
  // scattering it again; without hooks, `hidden` itself. A model that calls it states
  // Workload::sequence_parallel_length() and its sequence_parallel_parameters().
  torch::Tensor call_sequence_region(const torch::Tensor& hidden, std::int64_t sequence_dim);
  // The parameters held whole that run on the sequence's share under sequence parallelism (the
  // LayerNorms inside the region): each rank's gradient is then its share's part, which tp sums.
  virtual std::vector<torch::Tensor> sequence_parallel_parameters() { return {}; }

  // The model as a chain, what a pipeline cuts between stages: input -> chain_head -> unit 0 -> ...
  // -> unit n-1 -> chain_tail -> output, unit i being wrap_units()[i]'s computation. A chain model
  // returns n here, implements the parts below and writes forward as forward_range(input, 0, n), so
  // its forward is the chain by construction and no other strategy pays for it. 0 (the default):
  // not a chain, and chain_refusal() says why, for a pipeline to refuse the model in one line.
  virtual std::size_t chain_length() const { return 0; }
  virtual std::string chain_refusal() const { return "its forward is not written as a chain of its wrap units"; }
  // The parameters chain_head and chain_tail use; a tied one is in both (gpt2's token embedding is
  // also its output projection).
  virtual std::vector<torch::Tensor> chain_head_parameters() { return {}; }
  virtual std::vector<torch::Tensor> chain_tail_parameters() { return {}; }
  // Units [begin, end) of the chain on `x`, one unit at least (a pipeline stage holds one or more):
  // chain_head first where begin is 0, chain_tail after where end is chain_length(), each unit
  // through call_unit. Throws std::logic_error on a model that is no chain, an empty range or one
  // outside the chain.
  torch::Tensor forward_range(const torch::Tensor& x, std::size_t begin, std::size_t end);
  // The whole chain but its tail: what the output layer reads, for a workload that runs the output
  // layer with its loss (call_output_loss). Throws std::logic_error on a model that is no chain.
  torch::Tensor forward_before_tail(const torch::Tensor& input);

 protected:
  // A chain's parts (see chain_length): what comes before the first unit, unit `unit`'s own
  // computation on what the one before it gave, and what comes after the last.
  virtual torch::Tensor chain_head(const torch::Tensor& input) { return input; }
  virtual torch::Tensor chain_unit(std::size_t unit, const torch::Tensor& hidden);
  virtual torch::Tensor chain_tail(const torch::Tensor& hidden) { return hidden; }

  // The hooks installed, or null: for a model that runs its units some other way than call_unit
  // (a TorchScript module's, models/scripted_units.h).
  UnitCallHooks* unit_hooks() const { return unit_hooks_; }
  // Runs unit `unit`'s part of forward, body(input) returning its output, between the hooks if any,
  // checkpointed where the policy says (then `body` runs again in backward: it may keep no reference
  // to anything of the caller's frame but what it captured by value).
  torch::Tensor call_unit(std::size_t unit, const torch::Tensor& input,
                          const std::function<torch::Tensor(const torch::Tensor&)>& body);

 private:
  UnitCallHooks* unit_hooks_ = nullptr;
  LayerCallHooks* layer_hooks_ = nullptr;
  std::shared_ptr<const ActivationCheckpointing> checkpointing_;
};

// The fresh_instance() of a model built by its default constructor.
template <typename Derived>
class DefaultConstructedModel : public WorkloadModel {
 public:
  ModelPtr fresh_instance() const override { return std::make_shared<Derived>(); }
};

// The wrap units as a sharding strategy takes them: for each of `units`, the indices into
// `trainable` (a model's trainable_parameters()) of its parameters, each parameter in at most one
// unit. A parameter two units name (a tied weight) is in neither: the root holds it for the whole
// step, as it holds the parameters in no unit; a frozen one is in none. A unit may come out empty.
// Throws std::logic_error where a unit names a trainable tensor that is not in `trainable`.
std::vector<std::vector<std::size_t>> units_as_sharded(const std::vector<WrapUnit>& units,
                                                       const std::vector<torch::Tensor>& trainable);

// A deep copy of `model` on `device`: a fresh instance moved there, every parameter and buffer
// copied by name in its original's type (no autograd history), training mode kept. Throws
// std::logic_error when the fresh instance does not have the same parameters and buffers.
ModelPtr clone_model(const WorkloadModel& model, const c10::Device& device);

// Converts the floating-point parameters and buffers of `model` to `dtype` in place; integer
// buffers (BatchNorm's num_batches_tracked) stay as they are, which Module::to(dtype) does not do.
void set_floating_dtype(torch::nn::Module& model, c10::ScalarType dtype);

// A dataset held in memory: row i of `inputs` and of `targets` is sample i.
struct Dataset {
  torch::Tensor inputs;
  torch::Tensor targets;
  std::int64_t size() const { return inputs.size(0); }
};

// How a sequence model's work and what its forward keeps grow with its tokens a sample, for the
// projection's --seq-len (docs/projection.md). All zero: not a sequence model.
struct SequenceFacts {
  std::int64_t tokens = 0;      // tokens a sample in this run
  std::int64_t max_tokens = 0;  // the longest sequence the model takes (its position table)
  // Of flops_per_sample, the part that grows as the square of the tokens (attention's scores and
  // weighted sums); the rest grows linearly.
  double attention_flops = 0;
  // The tokens x tokens elements a sample that forward keeps for backward: plain attention's
  // softmax output, a [heads, tokens, tokens] tensor a layer; 0 under sdpa's fused kernels, which
  // keep a row's log-sum-exp instead. The rest of what forward keeps grows linearly.
  std::int64_t saved_score_elements = 0;
  // The bytes of one of those elements, which the run's precision and device decide (the workload
  // cannot: plan_cases sets it, devices/precision.h); 0 until then.
  std::int64_t saved_score_element_bytes = 0;
};

// Figures that let throughput be read against the machine's limits.
struct WorkloadFacts {
  std::int64_t parameters = 0;
  std::int64_t gradient_bytes = 0;
  // Bytes of the trainable parameters that fsdp holds whole with the root for the whole step: in
  // no wrap unit, or named by two (units_as_sharded); all of them for a model of one unit.
  std::int64_t root_parameter_bytes = 0;
  double flops_per_sample = 0;  // forward + backward, multiply-adds counted as two
  SequenceFacts sequence;
  // Bytes forward keeps for backward whatever the batch and the sequence (gpt2's fused loss: the
  // output weight's fp32 gradient, taken in forward): where the activations' line starts.
  std::int64_t fixed_activation_bytes = 0;
  // The model as a chain (WorkloadModel::chain_length; 0: none, and chain_refusal says why).
  std::size_t chain_length = 0;
  std::string chain_refusal;
  // The tensor-parallel plan's layers (WorkloadModel::tensor_parallel_plan; none: no plan, and
  // tensor_parallel_refusal says why).
  std::vector<TensorParallelLayerShape> tensor_parallel_layers;
  std::string tensor_parallel_refusal;
};

// Run-wide choices that some workloads size themselves by: gpt2 takes its tokens per sample and
// its default batch from them. Set once per process before any model, dataset or default batch is
// asked for (Runner's constructor; the launcher, each rank and each worker process parse the same
// flags), so every process of a run agrees.
struct WorkloadSettings {
  bool cuda = false;                            // the run's devices are GPUs
  std::optional<std::int64_t> sequence_length;  // --seq-len; none: the workload's default
  std::string gpt2_size;                        // --gpt2-size (workloads/gpt2_size.h); empty: small
  bool gpt2_plain_loss = false;                 // --gpt2-loss plain: whole logits, then the loss
};
void configure_workloads(const WorkloadSettings& settings);
const WorkloadSettings& workload_settings();

class Workload {
 public:
  virtual ~Workload() = default;

  virtual std::string name() const = 0;
  virtual std::string description() const = 0;
  virtual std::int64_t default_global_batch() const = 0;
  // A freshly initialised model (LibTorch's default initialisation from the global generator: the
  // harness seeds it, so every strategy starts from the same weights).
  virtual ModelPtr make_model() const = 0;
  // `size` samples, a pure function of (size, seed).
  virtual Dataset make_dataset(std::int64_t size, std::uint64_t seed) const = 0;
  virtual std::unique_ptr<torch::optim::Optimizer> make_optimizer(std::vector<torch::Tensor> parameters) const;
  // The optimizer of the parity check against `single`, which verifies that a strategy computes
  // single's gradients and applies them. The default is the workload's own; a workload whose
  // optimizer turns rounding noise into parameter differences (see transformer) names another.
  virtual std::unique_ptr<torch::optim::Optimizer> make_parity_optimizer(std::vector<torch::Tensor> parameters) const {
    return make_optimizer(std::move(parameters));
  }
  // Mean loss over the batch; the default is cross-entropy over the last dimension.
  virtual torch::Tensor loss(const torch::Tensor& output, const torch::Tensor& target) const;
  // Forward and loss in one, for strategies that need no output but the loss (single, ddp,
  // hogwild, dp-loss-in-model; dp gathers outputs and calls loss() itself). The default is
  // loss(model.forward(input), target); a workload may fuse its last layer with its loss (gpt2's
  // chunked output projection and cross-entropy), which must give the same loss and gradients.
  virtual torch::Tensor forward_loss(WorkloadModel& model, const torch::Tensor& input, const torch::Tensor& target) const {
    return loss(model.forward(input), target);
  }
  virtual double flops_per_sample() const = 0;
  // A sequence model's SequenceFacts (saved_score_element_bytes aside); the default: none.
  virtual SequenceFacts sequence_facts() const { return {}; }
  // WorkloadFacts::fixed_activation_bytes; the default: none.
  virtual std::int64_t fixed_activation_bytes() const { return 0; }
  // True where per-replica BatchNorm statistics make data-parallel results differ from `single`.
  virtual bool has_batch_norm() const { return false; }
  // Whether --sync-bn can turn its BatchNorm layers into SyncBatchNorm (a TorchScript model's cannot).
  virtual bool converts_to_sync_batch_norm() const { return has_batch_norm(); }
  // The largest --seq-len the model accepts (its positional table); 0: --seq-len does not apply.
  virtual std::int64_t max_sequence_length() const { return 0; }
  // The tokens a sample that tp's --sequence-parallel splits among its ranks (the model calls
  // call_sequence_region); 0: the model has no sequence to split.
  virtual std::int64_t sequence_parallel_length() const { return 0; }

  // Parameter count and gradient bytes, from a model built once and cached.
  WorkloadFacts facts() const;
};

class WorkloadRegistry {
 public:
  static WorkloadRegistry& instance();

  // Workloads are stateless descriptions, so the registry holds one instance of each.
  void add(std::unique_ptr<Workload> workload);
  // Registers `workload`, replacing the one of its name: models loaded at run time (--model), which a
  // process may load again with other settings. Nothing may hold the replaced one.
  void put(std::unique_ptr<Workload> workload);
  // Throws UsageError naming --workload and the known names.
  const Workload& get(const std::string& name) const;
  bool contains(const std::string& name) const;
  // Registration order is not stable across link orders; names are sorted, `mlp` first.
  std::vector<std::string> names() const;

  // A registration that failed (a name taken, a constructor that threw), in words, kept for whoever
  // loaded the code that tried it (--workload-lib's loader) to report; take_ empties the list.
  void note_failed_registration(std::string what);
  std::vector<std::string> take_failed_registrations();

 private:
  std::vector<std::unique_ptr<Workload>> workloads_;
  std::vector<std::string> failed_registrations_;
};

// A registration never throws: it runs as a static initialiser, in the executable before main or in
// a plug-in inside dlopen, and an exception there ends the process (dlopen cannot unwind it). A
// failure is noted in the registry instead, and the plug-in's loader refuses the library in one line.
template <typename W>
struct WorkloadRegistration {
  WorkloadRegistration() noexcept {
    auto& registry = WorkloadRegistry::instance();
    try {
      registry.add(std::make_unique<W>());
    } catch (const std::exception& e) {
      registry.note_failed_registration(e.what());
    } catch (...) {
      registry.note_failed_registration("a workload's constructor threw something that is not a std::exception");
    }
  }
};

#define DDPBENCH_REGISTER_WORKLOAD(Type) \
  static const ::ddpbench::WorkloadRegistration<Type> ddpbench_workload_registration_##Type {}

// `size` token sequences for next-token prediction: `tokens` inputs and the same shifted by one as
// targets, over `vocab` ids, where each next token is (31 t + 7) mod vocab four times in five and a
// random one otherwise (a learnable rule with noise). A pure function of (size, seed).
Dataset next_token_dataset(std::int64_t size, std::uint64_t seed, std::int64_t vocab, std::int64_t tokens);

// Cross-entropy over class logits [batch, classes] or [batch, ..., classes] against integer targets.
torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets);

}  // namespace ddpbench
