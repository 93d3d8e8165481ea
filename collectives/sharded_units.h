#pragma once
// ZeRO stage 3 as FSDP runs it (fsdp): the model's parameters in units (its wrap units, and the root
// for the rest), each unit one padded flat buffer of which every rank keeps only its chunk between
// steps, with that chunk's gradient and optimizer state. A unit's full parameters exist only while it
// runs: all-gathered before its forward and freed after (reshard after forward), all-gathered again
// before its backward, and freed once its gradients are reduce-scattered into the ranks' chunks.
// The next unit's all-gather is prefetched while the current one computes, in forward and in
// backward. Every collective runs on one CommThread, so every rank posts the same ones in the same
// order (the model and its autograd graph are the same on every rank).
//
// A unit's full buffer keeps its storage object while it is freed: the parameters stay views of
// it (autograd keeps them for backward) and only the memory under them goes, as FSDP2 frees an
// unsharded parameter's storage with resize_(0). Gathering writes into the buffer, never through
// the parameters, so their version counters do not move and autograd accepts them in backward.
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "collectives/comm_thread.h"
#include "collectives/gradient_ready_hooks.h"
#include "collectives/unused_parameters.h"
#include "timing/phase_recorder.h"

namespace ddpbench {

class ProcessGroupContext;

struct ShardedUnitOptions {
  bool reshard_after_forward = true;  // false: FSDP's SHARD_GRAD_OP, freed only after backward
  bool prefetch = true;               // false (--no-prefetch): each all-gather when its unit needs it
  bool overlap = true;                // false (--no-overlap): collectives run on the step's thread
  // Parameters gathered in this dtype (FSDP2's param_dtype, bf16 under --dtype bf16); gradients are
  // reduced in the chunks' own dtype (reduce_dtype fp32). None: the chunks' dtype.
  std::optional<c10::ScalarType> gather_dtype;
  // Gradients accumulate over several backwards of one step (pp's micro-batches) straight into the
  // units' gradient buffers (each parameter's .grad a view of its unit's, from begin_step()), and
  // finish_backward() reduce-scatters them: nothing is reduced during backward, as under FSDP2's
  // set_requires_gradient_sync(False) until the last one. Not with gather_dtype (a .grad takes its
  // parameter's dtype, and the buffers are the chunks').
  bool gradients_at_finish = false;
};

struct UnitTraffic {
  std::int64_t steps = 0;
  std::int64_t reduce_scatter_bytes = 0;  // payloads (the padded units), not bytes sent
  std::int64_t all_gather_bytes = 0;
  std::int64_t allreduce_bytes = 0;       // the step's loss
  double reduce_scatter_seconds = 0;      // each collective from start to this rank's end, summed
  double all_gather_seconds = 0;
  std::int64_t collectives = 0;  // all-gathers, reduce-scatters (one a unit) and the loss's all-reduce
};

class ShardedUnits {
 public:
  // `units[u]`: indices into `parameters` (registration order, the same shapes on every rank), each
  // parameter in at most one unit; the parameters in none form one more unit, the root, gathered
  // for the whole step. The parameters become views of their units' buffers, which are then freed.
  ShardedUnits(std::vector<torch::Tensor> parameters, std::vector<std::vector<std::size_t>> units,
               ProcessGroupContext& group, ShardedUnitOptions options);
  ~ShardedUnits();
  ShardedUnits(const ShardedUnits&) = delete;
  ShardedUnits& operator=(const ShardedUnits&) = delete;

  // This rank's chunk of each unit (the root's last, if it has parameters): what its optimizer
  // steps. After finish_backward() each one's .grad is its reduced gradient chunk.
  const std::vector<torch::Tensor>& parameter_shards() const { return shards_; }
  // The same chunks cut at the parameters' edges (unused_parameters.h): what the optimizer steps.
  // After finish_backward() each piece's .grad is its part of the reduced chunk, none for a
  // parameter no rank's backward reached.
  const std::vector<torch::Tensor>& optimizer_parameters() const { return pieces_; }
  std::size_t unit_count() const { return units_.size(); }  // the root included, if any
  bool gradients_at_finish() const { return options_.gradients_at_finish; }
  std::int64_t unit_numel(std::size_t unit) const;          // padded
  std::int64_t unit_bytes(std::size_t unit) const;          // padded, in its chunk's dtype
  bool unit_is_root(std::size_t unit) const { return units_.at(unit).root; }

  // Before the step: lets go of the last step's reduced gradient chunks (each is allocated again when
  // its unit is reduce-scattered), as FSDP2 under PyTorch 2's zero_grad() (set_to_none=True).
  void free_gradients();
  // Before forward: this rank's gradients enter the reduce-scatters times `grad_scale` (its share of
  // the global batch); gathers the root and prefetches the first unit. No other collective of the
  // group may run until finish_backward() returns: every one of the step's goes through this object.
  // `add_to_gradients` (fsdp's --grad-accum, one begin_step to finish_backward a micro-batch): each
  // unit's reduce-scatter adds into the chunk's gradient the micro-batches before it left there,
  // rather than replacing it.
  void begin_step(double grad_scale, PhaseRecorder* phases, bool add_to_gradients = false);
  // After forward: this rank's loss (already scaled), summed over the ranks by finish_backward().
  void set_loss(const torch::Tensor& loss);
  // Around unit u's forward, and before its backward (from a hook on its output's gradient).
  void before_forward(std::size_t unit);
  void after_forward(std::size_t unit);
  void before_backward(std::size_t unit);
  // After backward: reduce-scatters what is left, waits for all of it, frees every full buffer;
  // returns the global loss.
  torch::Tensor finish_backward();
  // Every parameter's full values, gathered into new tensors (parity): a collective, on every rank.
  std::vector<torch::Tensor> gather_full_parameters();

  // Bytes of full parameter buffers held now (0 between steps) and gradient bytes held (the chunks'
  // gradients; a unit's full gradient buffer only from its last gradient to its reduce-scatter;
  // autograd's gradients of a unit still in backward are not counted).
  std::int64_t full_parameter_bytes_held() const;
  std::int64_t gradient_bytes_held() const;
  // The padded units' bytes in the chunks' dtype.
  std::int64_t padded_bytes() const;
  const UnitTraffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

 private:
  enum class Held { Freed, Gathering, Gathered };
  struct Unit {
    std::vector<std::size_t> params;    // indices into parameters_
    std::vector<std::int64_t> offsets;  // each one's first element in the buffer
    std::int64_t numel = 0;             // padded
    bool root = false;
    torch::Tensor full;                 // padded, gather dtype; the parameters are views of it
    torch::Tensor shard;                // this rank's chunk, a tensor of its own (the optimizer's)
    torch::Tensor grad_shard;           // its reduced gradient, the shard's .grad; none from
                                        // free_gradients() to its reduce-scatter
    torch::Tensor flat_grads;           // padded, chunks' dtype: from its last gradient (the root's:
                                        // its first) to its reduce-scatter
    Held held = Held::Freed;
    std::uint64_t gather_ticket = 0;
    std::int64_t pending = 0;           // gradients still to come this step
    int forward_position = -1;          // its place in this step's forward order
    bool launched = false;              // its reduce-scatter posted this step
    double reduce_scatter_seconds = 0;  // this step's
    double all_gather_seconds = 0;
    std::unique_ptr<ShardPieces> pieces;  // `shard` cut at the parameters' edges
  };
  void link_piece_gradients();  // after the step's reduce-scatters and flags

  void post_gather(std::size_t unit);
  void ensure_gathered(std::size_t unit);
  void free_full(std::size_t unit);
  void on_gradient_ready(std::size_t param);
  void launch_reduce_scatter(std::size_t unit);
  void fill_gradient_buffer(std::size_t unit);  // allocates flat_grads and moves the unit's gradients in
  void move_gradient_in(Unit& unit, std::size_t slot);  // autograd's gradient into the buffer, or zeros

  std::vector<torch::Tensor> parameters_;
  ProcessGroupContext& group_;
  ShardedUnitOptions options_;
  std::vector<Unit> units_;
  std::vector<torch::Tensor> shards_;
  std::vector<torch::Tensor> pieces_;
  std::unique_ptr<UnusedParameterFlags> unused_;
  std::vector<std::size_t> unit_of_, slot_of_;
  std::vector<char> ready_;
  std::vector<std::size_t> forward_order_;  // units in the order this step's forward ran them
  torch::Tensor scale_, loss_;
  bool armed_ = false;
  bool add_to_gradients_ = false;  // begin_step's
  PhaseRecorder* phases_ = nullptr;
  UnitTraffic traffic_;
  mutable std::mutex mutex_;  // hooks may fire on several autograd threads
  CommThread comm_;           // after the units: its jobs touch them, so it joins first
  std::unique_ptr<GradientReadyHooks> hooks_;  // last: no hook fires into a half-destroyed object
};

}  // namespace ddpbench
