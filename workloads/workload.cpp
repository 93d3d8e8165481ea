#include "workloads/workload.h"

#include <torch/nn/functional/loss.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "base/errors.h"
#include "compat/torch_compat.h"
#include "optim/optimizers.h"

namespace ddpbench {

namespace {

// Copies `from` into `to` entry by entry; both come from the same architecture, so names and
// shapes must agree exactly.
void copy_by_name(const torch::OrderedDict<std::string, torch::Tensor>& from,
                  torch::OrderedDict<std::string, torch::Tensor>& to, const std::string& model, const char* what) {
  if (from.size() != to.size()) {
    throw std::logic_error("clone of model '" + model + "': " + std::to_string(to.size()) + " " + what +
                           " in a fresh instance, " + std::to_string(from.size()) + " in the original");
  }
  for (const auto& entry : from) {
    auto* target = to.find(entry.key());
    if (target == nullptr || !target->sizes().equals(entry.value().sizes())) {
      throw std::logic_error("clone of model '" + model + "': " + what + " '" + entry.key() +
                             "' is missing or has another shape in a fresh instance");
    }
    // Each tensor in its original's type (float64 in the parity pass; integer buffers stay integer).
    if (target->scalar_type() != entry.value().scalar_type()) target->set_data(target->to(entry.value().scalar_type()));
    target->copy_(entry.value());
  }
}

std::vector<torch::Tensor> each_tensor_once(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> out;
  std::unordered_set<const void*> seen;
  for (const auto& t : tensors) {
    if (seen.insert(t.unsafeGetTensorImpl()).second) out.push_back(t);
  }
  return out;
}

}  // namespace

const char* to_string(TensorParallelSplit split) {
  switch (split) {
    case TensorParallelSplit::Column: return "column";
    case TensorParallelSplit::Row: return "row";
    case TensorParallelSplit::Vocabulary: return "vocabulary";
  }
  return "?";
}

VocabularyShare vocabulary_share(std::int64_t features, int ranks, int rank) {
  const std::int64_t base = features / ranks, longer = features % ranks;
  return {rank * base + std::min<std::int64_t>(rank, longer), base + (rank < longer ? 1 : 0)};
}

std::string TensorParallelLayerShape::why_not_split(int ranks) const {
  const std::int64_t features = split_features();
  if (split == TensorParallelSplit::Vocabulary) {
    if (ranks > 0 && features >= ranks) return "";
    return name + "'s vocabulary of " + std::to_string(features) + " does not give each of " + std::to_string(ranks) +
           " ranks a row";
  }
  const std::int64_t part = packed > 0 ? features / packed : features;
  if (ranks > 0 && packed > 0 && granule > 0 && features % packed == 0 && part % (granule * ranks) == 0) return "";
  std::string what = std::to_string(features) + (split == TensorParallelSplit::Column ? " outputs" : " inputs");
  if (packed > 1) what += " (" + std::to_string(packed) + " packed parts of " + std::to_string(part) + ")";
  if (granule > 1) what += " in groups of " + std::to_string(granule);
  return name + "'s " + what + " (split by " + (split == TensorParallelSplit::Column ? "columns" : "rows") +
         ") do not divide among " + std::to_string(ranks) + " ranks";
}

TensorParallelLayer planned_linear(std::string name, torch::nn::LinearImpl& layer, TensorParallelSplit split,
                                   std::int64_t packed, std::int64_t granule) {
  return {std::move(name), layer.weight, layer.bias, split, packed, granule};
}

torch::Tensor WorkloadModel::call_linear(torch::nn::LinearImpl& layer, const torch::Tensor& x) {
  return call_linear(layer.weight, layer.bias, x);
}

torch::Tensor WorkloadModel::call_linear(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x) {
  return layer_hooks_ == nullptr ? torch::nn::functional::linear(x, weight, bias) : layer_hooks_->linear(weight, bias, x);
}

torch::Tensor WorkloadModel::call_embedding(torch::nn::EmbeddingImpl& table, const torch::Tensor& ids) {
  return layer_hooks_ == nullptr ? table.forward(ids) : layer_hooks_->embedding(table, ids);
}

torch::Tensor WorkloadModel::call_output_loss(const torch::Tensor& weight, const torch::Tensor& bias,
                                              const torch::Tensor& hidden, const torch::Tensor& targets,
                                              const std::function<torch::Tensor()>& as_the_workload_computes) {
  if (layer_hooks_ == nullptr) return as_the_workload_computes();
  return layer_hooks_->output_loss(weight, bias, hidden, targets, as_the_workload_computes);
}

torch::Tensor WorkloadModel::call_sequence_region(const torch::Tensor& hidden, std::int64_t sequence_dim) {
  return layer_hooks_ == nullptr ? hidden : layer_hooks_->enter_sequence_region(hidden, sequence_dim);
}

torch::Tensor WorkloadModel::call_unit(std::size_t unit, const torch::Tensor& input,
                                       const std::function<torch::Tensor(const torch::Tensor&)>& body) {
  const bool checkpointed = checkpointing_ != nullptr && checkpointing_->policy.checkpoints(unit);
  auto run = [&] { return checkpointed ? run_checkpointed(input, body, checkpointing_->recompute_scope) : body(input); };
  if (unit_hooks_ == nullptr) return run();
  unit_hooks_->before_unit(unit);
  return unit_hooks_->after_unit(unit, run());
}

torch::Tensor WorkloadModel::chain_unit(std::size_t, const torch::Tensor&) {
  throw std::logic_error("chain_unit on a model that is no chain: " + chain_refusal());
}

torch::Tensor WorkloadModel::forward_range(const torch::Tensor& x, std::size_t begin, std::size_t end) {
  const std::size_t n = chain_length();
  if (n == 0) throw std::logic_error("forward_range on a model that is no chain: " + chain_refusal());
  if (begin >= end || end > n) {
    throw std::logic_error("forward_range(" + std::to_string(begin) + ", " + std::to_string(end) + ") outside a chain of " +
                           std::to_string(n) + " units");
  }
  torch::Tensor h = begin == 0 ? chain_head(x) : x;
  for (std::size_t i = begin; i < end; ++i) h = call_unit(i, h, [this, i](const torch::Tensor& x) { return chain_unit(i, x); });
  return end == n ? chain_tail(h) : h;
}

torch::Tensor WorkloadModel::forward_before_tail(const torch::Tensor& input) {
  const std::size_t n = chain_length();
  if (n == 0) throw std::logic_error("forward_before_tail on a model that is no chain: " + chain_refusal());
  torch::Tensor h = chain_head(input);
  for (std::size_t i = 0; i < n; ++i) h = call_unit(i, h, [this, i](const torch::Tensor& x) { return chain_unit(i, x); });
  return h;
}

std::vector<torch::Tensor> WorkloadModel::distinct_parameters() const { return each_tensor_once(parameters()); }
std::vector<torch::Tensor> WorkloadModel::distinct_buffers() const { return each_tensor_once(buffers()); }
std::vector<std::string> WorkloadModel::distinct_parameter_names() const {
  std::vector<std::string> out;
  std::unordered_set<const void*> seen;
  for (const auto& p : named_parameters()) {
    if (seen.insert(p.value().unsafeGetTensorImpl()).second) out.push_back(p.key());
  }
  return out;
}

std::vector<torch::Tensor> WorkloadModel::trainable_parameters() const {
  std::vector<torch::Tensor> out;
  for (const auto& p : distinct_parameters()) {
    if (p.requires_grad()) out.push_back(p);
  }
  return out;
}

void set_floating_dtype(torch::nn::Module& model, c10::ScalarType dtype) {
  torch::NoGradGuard no_grad;
  for (auto tensors : {model.parameters(), model.buffers()}) {
    for (auto& t : tensors) {
      if (t.is_floating_point() && t.scalar_type() != dtype) t.set_data(t.to(dtype));
    }
  }
}

ModelPtr clone_model(const WorkloadModel& model, const c10::Device& device) {
  torch::NoGradGuard no_grad;
  auto copy = model.fresh_instance();
  if (!copy) throw std::logic_error("model '" + model.name() + "' returned no fresh instance");
  copy->to(device);
  auto parameters = copy->named_parameters();
  auto buffers = copy->named_buffers();
  copy_by_name(model.named_parameters(), parameters, model.name(), "parameters");
  copy_by_name(model.named_buffers(), buffers, model.name(), "buffers");
  copy->train(model.is_training());
  copy->set_activation_checkpointing(model.activation_checkpointing());
  return copy;
}

std::unique_ptr<torch::optim::Optimizer> Workload::make_optimizer(std::vector<torch::Tensor> parameters) const {
  return make_sgd(std::move(parameters), torch::optim::SGDOptions(0.01).momentum(0.9));
}

torch::Tensor cross_entropy(const torch::Tensor& logits, const torch::Tensor& targets) {
  // The loss in fp32 at least, whatever the logits' type: under --dtype bf16/fp16 the softmax over
  // many classes would lose the small probabilities, whichever autocast op lists this LibTorch has.
  // float64 logits (the parity pass under fp32) stay float64.
  const auto flat = logits.reshape({-1, logits.size(-1)});
  const bool wide_enough = flat.scalar_type() == torch::kFloat || flat.scalar_type() == torch::kDouble;
  return torch::nn::functional::cross_entropy(wide_enough ? flat : flat.to(torch::kFloat), targets.reshape({-1}));
}

Dataset next_token_dataset(std::int64_t size, std::uint64_t seed, std::int64_t vocab, std::int64_t tokens) {
  auto gen = compat::make_cpu_generator(seed);
  auto random_tokens = torch::randint(0, vocab, {size, tokens + 1}, gen, torch::kInt64);
  auto follow_rule = torch::rand({size, tokens + 1}, gen) < 0.8;
  auto sequence = random_tokens.clone();
  for (std::int64_t i = 1; i <= tokens; ++i) {
    auto ruled = (sequence.select(1, i - 1) * 31 + 7).remainder(vocab);
    sequence.select(1, i).copy_(torch::where(follow_rule.select(1, i), ruled, random_tokens.select(1, i)));
  }
  using torch::indexing::Slice;
  return {sequence.index({Slice(), Slice(0, tokens)}).contiguous(),
          sequence.index({Slice(), Slice(1, tokens + 1)}).contiguous()};
}

torch::Tensor Workload::loss(const torch::Tensor& output, const torch::Tensor& target) const {
  return cross_entropy(output, target);
}

std::vector<std::vector<std::size_t>> units_as_sharded(const std::vector<WrapUnit>& units,
                                                       const std::vector<torch::Tensor>& trainable) {
  std::unordered_map<const void*, std::size_t> index;
  for (std::size_t k = 0; k < trainable.size(); ++k) index[trainable[k].unsafeGetTensorImpl()] = k;
  std::vector<std::vector<std::size_t>> out;
  std::vector<int> units_naming(trainable.size(), 0);
  for (const auto& unit : units) {
    std::vector<std::size_t> members;
    for (const auto& p : unit.parameters) {
      const auto found = index.find(p.unsafeGetTensorImpl());
      if (found == index.end() && !p.requires_grad()) continue;  // frozen: held whole
      if (found == index.end()) throw std::logic_error("wrap unit " + unit.name + " names a tensor that is not a parameter of the model");
      if (std::find(members.begin(), members.end(), found->second) != members.end()) continue;
      members.push_back(found->second);
      ++units_naming[found->second];
    }
    out.push_back(std::move(members));
  }
  for (auto& members : out) {
    members.erase(std::remove_if(members.begin(), members.end(), [&](std::size_t k) { return units_naming[k] > 1; }),
                  members.end());
  }
  return out;
}

WorkloadFacts Workload::facts() const {
  WorkloadFacts f;
  torch::NoGradGuard no_grad;
  const auto model = make_model();
  for (const auto& p : model->distinct_parameters()) {
    f.parameters += p.numel();
    if (p.requires_grad()) f.gradient_bytes += p.numel() * static_cast<std::int64_t>(p.element_size());
  }
  const auto trainable = model->trainable_parameters();
  std::vector<char> in_unit(trainable.size(), 0);
  for (const auto& members : units_as_sharded(model->wrap_units(), trainable)) {
    for (std::size_t k : members) in_unit[k] = 1;
  }
  for (std::size_t k = 0; k < trainable.size(); ++k) {
    if (!in_unit[k]) f.root_parameter_bytes += trainable[k].numel() * static_cast<std::int64_t>(trainable[k].element_size());
  }
  f.flops_per_sample = flops_per_sample();
  f.sequence = sequence_facts();
  f.fixed_activation_bytes = fixed_activation_bytes();
  f.chain_length = model->chain_length();
  if (f.chain_length == 0) f.chain_refusal = model->chain_refusal();
  for (const auto& l : model->tensor_parallel_plan()) {
    f.tensor_parallel_layers.push_back({l.name, l.split, l.weight.size(1), l.weight.size(0), l.packed, l.granule});
  }
  if (f.tensor_parallel_layers.empty()) f.tensor_parallel_refusal = model->tensor_parallel_refusal();
  return f;
}

namespace {
WorkloadSettings& settings_slot() {
  static WorkloadSettings settings;
  return settings;
}
}  // namespace

void configure_workloads(const WorkloadSettings& settings) { settings_slot() = settings; }
const WorkloadSettings& workload_settings() { return settings_slot(); }

WorkloadRegistry& WorkloadRegistry::instance() {
  static WorkloadRegistry registry;
  return registry;
}

void WorkloadRegistry::add(std::unique_ptr<Workload> workload) {
  if (contains(workload->name())) {
    throw std::logic_error("workload '" + workload->name() + "' is registered already (a built-in workload's name, or an "
                           "earlier library's)");
  }
  workloads_.push_back(std::move(workload));
}

void WorkloadRegistry::note_failed_registration(std::string what) { failed_registrations_.push_back(std::move(what)); }

std::vector<std::string> WorkloadRegistry::take_failed_registrations() {
  std::vector<std::string> out;
  out.swap(failed_registrations_);
  return out;
}

void WorkloadRegistry::put(std::unique_ptr<Workload> workload) {
  for (auto& w : workloads_) {
    if (w->name() == workload->name()) {
      w = std::move(workload);
      return;
    }
  }
  workloads_.push_back(std::move(workload));
}

bool WorkloadRegistry::contains(const std::string& name) const {
  return std::any_of(workloads_.begin(), workloads_.end(), [&](const auto& w) { return w->name() == name; });
}

const Workload& WorkloadRegistry::get(const std::string& name) const {
  for (const auto& w : workloads_) {
    if (w->name() == name) return *w;
  }
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("--workload: unknown workload '" + name + "' (known: " + known + ")");
}

std::vector<std::string> WorkloadRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& w : workloads_) out.push_back(w->name());
  std::sort(out.begin(), out.end(), [](const std::string& a, const std::string& b) {
    if ((a == "mlp") != (b == "mlp")) return a == "mlp";  // the reference workload leads
    return a < b;
  });
  return out;
}

}  // namespace ddpbench
