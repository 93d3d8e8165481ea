#include "strategies/rank_state.h"

#include <limits>
#include <sstream>

#include "base/errors.h"
#include "distributed/process_group.h"

namespace ddpbench {
namespace {

// Checks that every rank starts from the same weights before rank 0's are broadcast over them:
// ranks that loaded different --model files (a stale copy on one node) would otherwise train rank
// 0's model without a word. Each rank's fingerprint (a position-weighted float64 sum of every
// tensor) is all-reduced into a vector of all of them, so every rank names the same culprit.
void check_same_initial_state(const std::vector<torch::Tensor>& state, ProcessGroupContext& group,
                              const std::string& strategy) {
  torch::NoGradGuard no_grad;
  // Summed where the tensors are, read once: an item() per tensor would be a device sync each on CUDA.
  const auto options = torch::TensorOptions().dtype(torch::kDouble).device(state.at(0).device());
  auto fingerprint = torch::zeros({}, options);
  for (size_t i = 0; i < state.size(); ++i) {
    fingerprint += static_cast<double>(i + 1) * state[i].to(torch::kDouble).sum();
  }
  auto all = torch::zeros({group.size()}, options);
  all[group.rank()] = fingerprint;
  group.allreduce(all, "check of every rank's initial weights");
  const auto fingerprints = all.cpu();
  for (int r = 1; r < group.size(); ++r) {
    const double a = fingerprints[0].item<double>(), b = fingerprints[r].item<double>();
    if (a != b) {
      std::ostringstream message;
      message.precision(17);
      message << strategy << ": rank " << r << " starts from other weights than rank 0 (fingerprint " << b << " against " << a
              << "): every rank must build or load the same model (the same --model file on every node)";
      throw CaseFailure(message.str());
    }
  }
}

}  // namespace

void start_from_rank0_state(const std::vector<torch::Tensor>& state, ProcessGroupContext& group,
                            const std::string& strategy) {
  check_same_initial_state(state, group, strategy);
  group.broadcast_from_rank0(state, "initial broadcast of rank 0's parameters and buffers");
}

void agree_on_overflow(const std::vector<torch::Tensor>& shards, const c10::Device& device, ProcessGroupContext& group) {
  torch::NoGradGuard no_grad;
  // A rank may hold no piece with a gradient (a parameter no rank used; a chunk of padding alone).
  auto found = torch::zeros({1}, torch::TensorOptions().device(device).dtype(torch::kFloat));
  for (const auto& s : shards) {
    if (s.grad().defined()) found += s.grad().isfinite().logical_not().any().to(torch::kFloat);
  }
  group.allreduce(found, "all-reduce of the fp16 overflow flag");
  if (found.item<float>() > 0) {
    for (const auto& s : shards) {
      if (s.grad().defined()) s.grad().fill_(std::numeric_limits<float>::quiet_NaN());
    }
  }
}

RankModel place_model_on_rank(const StrategySetup& setup, const std::string& strategy) {
  if (setup.process_group == nullptr) throw std::logic_error(strategy + " runs only inside a rank process");
  RankModel out;
  out.group = setup.process_group;
  out.device = setup.devices.device(out.group->local_rank());
  out.model = setup.model;
  out.model->to(out.device);
  out.model->train();
  std::vector<torch::Tensor> state = out.model->distinct_parameters();
  out.buffers = out.model->distinct_buffers();
  state.insert(state.end(), out.buffers.begin(), out.buffers.end());
  start_from_rank0_state(state, *out.group, strategy);
  return out;
}

RankForward rank_forward(const Batch& batch, const Workload& workload, WorkloadModel& model, const c10::Device& device,
                         ProcessGroupContext& group, const std::vector<torch::Tensor>& broadcast_buffers,
                         Precision precision, std::int64_t global_batch, PhaseRecorder& phases) {
  torch::Tensor inputs, targets;
  {
    auto scope = phases.scope(Phase::Data);
    inputs = batch.inputs.to(device, /*non_blocking=*/true);
    targets = batch.targets.to(device, /*non_blocking=*/true);
  }
  if (!broadcast_buffers.empty()) {
    auto scope = phases.scope(Phase::Replicate);
    group.broadcast_from_rank0(broadcast_buffers, "broadcast of rank 0's buffers");
  }
  RankForward out;
  {
    auto scope = phases.scope(Phase::Forward);
    AutocastScope autocast(precision, device);
    out.loss = workload.forward_loss(model, inputs, targets);
  }
  out.share = static_cast<double>(inputs.size(0)) / static_cast<double>(global_batch);
  return out;
}

}  // namespace ddpbench
