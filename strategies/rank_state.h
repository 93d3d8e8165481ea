#pragma once
// What every strategy whose ranks are processes does alike: before its first step, check that all
// ranks built or loaded the same weights and give every rank rank 0's parameters and buffers; in
// each step of the data-parallel ones (ddp, zero1, zero2; tp on the whole batch), the forward half.
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "devices/precision.h"
#include "strategies/strategy.h"
#include "timing/phase_recorder.h"
#include "workloads/workload.h"

namespace ddpbench {

class ProcessGroupContext;

// Throws CaseFailure naming `strategy` and the first rank whose weights differ from rank 0's (a
// stale --model file on one node would otherwise train rank 0's model without a word), then
// broadcasts rank 0's `state` over every rank's.
void start_from_rank0_state(const std::vector<torch::Tensor>& state, ProcessGroupContext& group,
                            const std::string& strategy);

// What a rank-process strategy's setup begins with (fsdp, zero1, zero2, pp, tp): its process group
// (std::logic_error naming `strategy` outside a rank process), its device, the model moved there
// in training mode and started from rank 0's parameters and buffers (start_from_rank0_state).
struct RankModel {
  ProcessGroupContext* group = nullptr;
  c10::Device device{c10::kCPU};
  ModelPtr model;
  std::vector<torch::Tensor> buffers;  // the model's distinct buffers, as broadcast
};
RankModel place_model_on_rank(const StrategySetup& setup, const std::string& strategy);

// The sharded strategies under fp16: each rank sees only its chunks' gradients (`shard_grads`), so
// ranks could disagree on whether the step overflowed and skip differently. One flag is summed over
// the ranks; where any rank found an inf or NaN, every rank poisons its own chunks so that its
// LossScaler skips the step too.
void agree_on_overflow(const std::vector<torch::Tensor>& shards, const c10::Device& device, ProcessGroupContext& group);

struct RankForward {
  torch::Tensor loss;  // this rank's mean loss over its part of the batch
  // Its part of the global batch: the weight its gradients and loss enter the sums with, so that
  // they sum to the global mean loss's, also when the parts differ by a sample.
  double share = 1;
};

// The forward half of a rank's step: the batch onto `device` (phase data), rank 0's
// `broadcast_buffers` over this rank's (replicate; skipped when empty, as DDP's
// broadcast_buffers), the forward pass and its loss under autocast (forward).
RankForward rank_forward(const Batch& batch, const Workload& workload, WorkloadModel& model, const c10::Device& device,
                         ProcessGroupContext& group, const std::vector<torch::Tensor>& broadcast_buffers,
                         Precision precision, std::int64_t global_batch, PhaseRecorder& phases);

}  // namespace ddpbench
