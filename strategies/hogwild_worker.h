#pragma once
// One Hogwild worker, the same in a thread (--hogwild-mode threads) and in a worker process
// (--hogwild-mode processes): its own instance of the workload's model whose parameters live in the
// shared storage, its own optimizer (so momentum buffers are per worker), and lock-free writes.
//
// sync_every 1 (plain Hogwild): the worker's parameters are the shared storage itself, under its own
// tensor objects (own version counters, own .grad). Each update reads the shared parameters as the
// forward pass goes, takes the gradient into its own .grad, and the optimizer writes it in
// place into the shared storage while other workers read and write it.
//
// sync_every K > 1: the worker trains a private copy for K steps, then adds what it learnt since its
// last sync (private minus the snapshot it started from) into the shared parameters and restarts
// from them. Summing the changes, not averaging them, keeps K = 1 exactly plain Hogwild.
//
// Buffers (BatchNorm running statistics) are always the shared storage.
#include <torch/types.h>

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "timing/phase_recorder.h"
#include "devices/precision.h"
#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace ddpbench {

struct HogwildUpdate {
  double loss = 0;                        // this worker's loss on its shard
  std::optional<std::int64_t> staleness;  // when this step wrote into the shared parameters
};

class HogwildWorker {
 public:
  // `model`: this worker's own model instance (its values are replaced). `shared_parameters` and
  // `shared_buffers`: the shared storage, in the model's distinct_parameters() and distinct_buffers() order.
  // `updates`: the shared update counter, incremented after every write into the shared parameters.
  HogwildWorker(ModelPtr model, const std::vector<torch::Tensor>& shared_parameters,
                const std::vector<torch::Tensor>& shared_buffers, const Workload& workload,
                const OptimizerFactory& make_optimizer, int sync_every, std::atomic<std::uint64_t>& updates,
                Precision precision = Precision::Fp32, int worker_index = 0, int workers = 1);

  // One update on this worker's shard. Marks forward, backward and optimizer on `phases`, this
  // worker's own recorder (so every worker's ranges nest in its own thread's step range).
  HogwildUpdate step(const torch::Tensor& inputs, const torch::Tensor& targets, PhaseRecorder& phases);

  // --grad-accum: each update sums the gradients of `count` micro-batches of the worker's rows
  // before its one optimizer step.
  void set_grad_accum(int count) { grad_accum_ = count; }

  // The parameters this worker trains: the shared storage, or its private copy (sync_every > 1).
  const std::vector<torch::Tensor>& parameters() const { return parameters_; }

 private:
  std::int64_t sync();  // adds this worker's change into the shared parameters; returns its staleness

  const Workload& workload_;
  ModelPtr model_;
  std::vector<torch::Tensor> parameters_;  // model_'s parameters
  std::vector<torch::Tensor> trainable_;   // those that require a gradient: what it steps
  std::vector<torch::Tensor> shared_;      // the shared parameters (sync_every > 1)
  std::vector<torch::Tensor> snapshot_;    // the shared parameters as of the last sync (sync_every > 1)
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  int sync_every_;
  Precision precision_;
  LossScaler scaler_;
  std::int64_t local_steps_ = 0;
  int grad_accum_ = 1;
  std::atomic<std::uint64_t>& updates_;
  std::uint64_t read_ticket_ = 0;  // the update counter when this worker last read the shared parameters
};

// The order in which worker `worker_index` of `workers` steps `parameters`: the list rotated to start
// at the tensor where its share of the elements begins (worker 0: as given). Workers are handed their
// rows at the same moment and reach their optimizer steps together; stepping the shared parameters
// in one order, each worker's writes invalidated the cache lines the other was writing at that very
// moment (a 2-worker step's optimizer phase took 2.5-4.3 ms against 1.4-1.6 ms for one worker, mlp,
// 2-core VM). In rotated orders they write different tensors at a time. Each parameter's update is
// its own, so the order changes no arithmetic.
std::vector<torch::Tensor> stepping_order(const std::vector<torch::Tensor>& parameters, int worker_index, int workers);

// Whether the atomic update counter can live in memory shared between processes.
static_assert(std::atomic<std::uint64_t>::is_always_lock_free, "the shared update counter must be lock-free");

}  // namespace ddpbench
