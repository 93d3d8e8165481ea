#include "strategies/hogwild_worker.h"

#include "strategies/microbatches.h"

#include <torch/csrc/autograd/autograd.h>

#include <stdexcept>

namespace ddpbench {
namespace {

// Re-points `tensor` at `storage_of`'s storage. The tensor keeps its own TensorImpl, so its version
// counter and its .grad stay its own: another worker's in-place write into the shared storage does
// not trip this worker's autograd checks (the same reason Python's Hogwild uses `.data`).
void share_storage(torch::Tensor& tensor, const torch::Tensor& storage_of) {
  if (!tensor.sizes().equals(storage_of.sizes()) || tensor.scalar_type() != storage_of.scalar_type()) {
    throw std::logic_error("hogwild: a worker's model does not match the shared parameters");
  }
  tensor.set_data(storage_of.variable_data());
}

}  // namespace

HogwildWorker::HogwildWorker(ModelPtr model, const std::vector<torch::Tensor>& shared_parameters,
                             const std::vector<torch::Tensor>& shared_buffers, const Workload& workload,
                             const OptimizerFactory& make_optimizer, int sync_every,
                             std::atomic<std::uint64_t>& updates, Precision precision, int worker_index, int workers)
    : workload_(workload),
      model_(std::move(model)),
      sync_every_(sync_every),
      precision_(precision),
      scaler_(precision),
      updates_(updates) {
  if (sync_every_ < 1) throw std::logic_error("hogwild: sync_every must be at least 1");
  torch::NoGradGuard no_grad;
  model_->train();
  parameters_ = model_->distinct_parameters();
  auto buffers = model_->distinct_buffers();
  if (parameters_.size() != shared_parameters.size() || buffers.size() != shared_buffers.size()) {
    throw std::logic_error("hogwild: a worker's model does not match the shared parameters");
  }
  for (size_t i = 0; i < buffers.size(); ++i) share_storage(buffers[i], shared_buffers[i]);
  read_ticket_ = updates_.load(std::memory_order_acquire);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (sync_every_ == 1) {
      share_storage(parameters_[i], shared_parameters[i]);
    } else {
      parameters_[i].copy_(shared_parameters[i]);
      shared_.push_back(shared_parameters[i].detach());
      snapshot_.push_back(parameters_[i].detach().clone());
    }
  }
  for (const auto& p : parameters_) {
    if (p.requires_grad()) trainable_.push_back(p);
  }
  optimizer_ = make_optimizer(stepping_order(trainable_, worker_index, workers));
}

std::vector<torch::Tensor> stepping_order(const std::vector<torch::Tensor>& parameters, int worker_index, int workers) {
  if (workers < 1 || worker_index < 0 || worker_index >= workers) {
    throw std::logic_error("hogwild: stepping_order of a worker outside 0..workers-1");
  }
  std::int64_t total = 0;
  for (const auto& p : parameters) total += p.numel();
  // The first tensor that begins at or after this worker's share of the elements.
  const double share_begins = static_cast<double>(total) * worker_index / workers;
  size_t first = 0;
  std::int64_t begins = 0;
  while (first < parameters.size() && static_cast<double>(begins) < share_begins) begins += parameters[first++].numel();
  if (first == parameters.size()) first = 0;
  std::vector<torch::Tensor> out(parameters.begin() + static_cast<std::ptrdiff_t>(first), parameters.end());
  out.insert(out.end(), parameters.begin(), parameters.begin() + static_cast<std::ptrdiff_t>(first));
  return out;
}

HogwildUpdate HogwildWorker::step(const torch::Tensor& inputs, const torch::Tensor& targets, PhaseRecorder& phases) {
  HogwildUpdate update;
  if (sync_every_ == 1) read_ticket_ = updates_.load(std::memory_order_acquire);
  torch::Tensor loss;
  for (const auto& mb : split_microbatches(Batch{inputs, targets}, grad_accum_)) {
    torch::Tensor part;
    {
      auto scope = phases.scope(Phase::Forward);
      AutocastScope autocast(precision_, inputs.device());
      part = workload_.forward_loss(*model_, mb.batch.inputs, mb.batch.targets);
      if (grad_accum_ > 1) part = part * mb.weight;
    }
    {
      auto scope = phases.scope(Phase::Backward);
      // Into this worker's own .grad (summed over its micro-batches): its parameters are TensorImpls
      // of its own over the shared storage (share_storage), so no other worker sees them. backward()
      // rather than autograd::grad(): a checkpointed unit's recomputation (--activation-checkpointing)
      // accumulates its parameters' gradients into .grad, which autograd::grad would not return.
      scaler_.scale(part).backward();
    }
    loss = loss.defined() ? loss + part.detach() : part.detach();
  }
  {
    auto scope = phases.scope(Phase::Optimizer);
    // sync_every 1: in place into the shared storage, without a lock. Under fp16 a step whose
    // gradients overflowed writes nothing.
    const bool stepped = scaler_.step(*optimizer_);
    for (auto& p : trainable_) p.mutable_grad() = torch::Tensor();
    ++local_steps_;
    if (sync_every_ == 1) {
      if (stepped) update.staleness = static_cast<std::int64_t>(updates_.fetch_add(1, std::memory_order_acq_rel) - read_ticket_);
    } else if (local_steps_ % sync_every_ == 0) {
      update.staleness = sync();
    }
  }
  update.loss = loss.item<double>();
  return update;
}

std::int64_t HogwildWorker::sync() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i].sub_(snapshot_[i]);  // what this worker learnt since its last sync, in place
    shared_[i].add_(parameters_[i]);     // lock-free: other workers may be adding theirs
  }
  const auto staleness = static_cast<std::int64_t>(updates_.fetch_add(1, std::memory_order_acq_rel) - read_ticket_);
  read_ticket_ = updates_.load(std::memory_order_acquire);
  for (size_t i = 0; i < parameters_.size(); ++i) {
    parameters_[i].copy_(shared_[i]);
    snapshot_[i].copy_(parameters_[i]);
  }
  return staleness;
}

}  // namespace ddpbench
