#pragma once
// ZeRO stages 1 and 2 (zero1, zero2): the parameters live in padded flat buckets (the model's
// parameters are views of them), each rank owns chunk rank() of every bucket, and its optimizer
// steps only those chunks. Gradients enter the buckets as backward produces them (bucket_plan.h's
// order); each bucket is reduce-scattered the moment it is complete, on a CommThread while backward
// goes on, so each rank receives the summed gradient of its own chunk. After the step every rank's
// updated chunks are all-gathered back into every rank's buckets. Stage 1 keeps each bucket's full
// gradient buffer between steps, as ZeRO-1 holds all gradients; stage 2 frees it once it is
// reduce-scattered, so no full gradient buffer outlives backward (SHARDED.md's table).
#include <torch/types.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/bucket_plan.h"
#include "collectives/comm_thread.h"
#include "collectives/gradient_ready_hooks.h"
#include "collectives/unused_parameters.h"
#include "timing/phase_recorder.h"

namespace ddpbench {

class ProcessGroupContext;

struct ShardedBucketOptions {
  BucketCaps caps;
  bool overlap = true;               // false (--no-overlap): every reduce-scatter starts after backward
  bool keep_full_gradients = true;   // zero1: true; zero2: false
};

// What the sharded collectives moved and took, summed over the steps since reset_traffic().
struct ShardTraffic {
  std::int64_t steps = 0;
  std::int64_t reduce_scatter_bytes = 0;  // payloads (the padded buckets), not bytes sent
  std::int64_t all_gather_bytes = 0;
  std::int64_t allreduce_bytes = 0;       // the step's loss
  double reduce_scatter_seconds = 0;      // each reduce-scatter from start to this rank's end, summed
  double all_gather_seconds = 0;
  std::int64_t launched_during_backward = 0;
  // Per bucket in launch order, summed over the steps: when its last gradient was ready, from the
  // start of backward, and how long its reduce-scatter took (the timeline a projection replays).
  std::vector<double> ready_seconds;
  std::vector<double> bucket_reduce_scatter_seconds;
};

class ShardedBuckets {
 public:
  // `parameters` in registration order, the same shapes on every rank. They become views of the
  // buckets (their values kept).
  ShardedBuckets(std::vector<torch::Tensor> parameters, ProcessGroupContext& group, ShardedBucketOptions options);
  ~ShardedBuckets();
  ShardedBuckets(const ShardedBuckets&) = delete;
  ShardedBuckets& operator=(const ShardedBuckets&) = delete;

  // This rank's chunk of each bucket (flat views of it): what its optimizer steps. After
  // wait_reduce_scatter() each one's .grad is its reduced gradient chunk.
  const std::vector<torch::Tensor>& parameter_shards() const { return shards_; }
  // The same chunks cut at the parameters' edges (unused_parameters.h): what the optimizer steps.
  // After wait_reduce_scatter() each piece's .grad is its part of the reduced chunk, none for a
  // parameter no rank's backward reached.
  const std::vector<torch::Tensor>& optimizer_parameters() const { return pieces_; }

  // Before the step's forward: stage 2 lets go of the last step's reduced chunks (each is allocated
  // again when its bucket is reduce-scattered), as PyTorch 2's zero_grad() sets gradients to none;
  // stage 1's chunks are views of its full buffers, which live on as DDP's buckets do.
  void free_gradients();
  // Before backward: this rank's gradients enter the buckets times `grad_scale` (its share of the
  // global batch); `loss` (already scaled) is summed over the ranks with them. `add_to_gradients`
  // (--grad-accum --sync-every-microbatch, a round a micro-batch): each bucket's reduce-scatter adds
  // into the chunk the rounds before it left, rather than replacing it.
  void prepare_step(double grad_scale, const torch::Tensor& loss, PhaseRecorder* phases = nullptr,
                    bool add_to_gradients = false);
  // After backward: reduce-scatters what is left and waits for all of it; returns the global loss.
  torch::Tensor wait_reduce_scatter();
  // After the optimizer step: every rank's chunks into every rank's buckets (the parameters).
  void all_gather_parameters();

  int bucket_count() const { return static_cast<int>(buckets_.size()); }
  // The padded buckets' bytes: what one reduce-scatter (or all-gather) of all of them carries.
  std::int64_t padded_bytes() const;
  // One padded bucket's bytes, in launch order.
  std::int64_t bucket_bytes(std::size_t bucket) const;
  // Gradient bytes this rank holds now: stage 1, the full bucket buffers (its reduced chunks are
  // views of them); stage 2, its reduced chunks (and a bucket's full buffer only from its first
  // gradient to its reduce-scatter). Call between steps.
  std::int64_t gradient_bytes_held() const;
  const ShardTraffic& traffic() const { return traffic_; }
  void reset_traffic() { traffic_ = {}; }

 private:
  struct Bucket {
    std::vector<std::size_t> params;     // indices into parameters_, in bucket order
    std::vector<std::int64_t> offsets;   // each one's first element in the bucket
    torch::Tensor flat_params;           // padded; the parameters are views of it
    torch::Tensor shard;                 // this rank's chunk of flat_params
    torch::Tensor flat_grads;            // padded; stage 2: only from its first gradient to its reduce-scatter
    torch::Tensor grad_shard;            // the reduced chunk, the shard's .grad (stage 1: a view of flat_grads;
                                         // stage 2: none from free_gradients() to its reduce-scatter)
    torch::Tensor carried;               // add_to_gradients: the rounds before's reduced chunk, added after
                                         // this round's reduce-scatter (stage 1: a copy, backward
                                         // overwrites the chunk's region of flat_grads)
    std::unique_ptr<ShardPieces> pieces;  // `shard` cut at the parameters' edges
    std::int64_t pending = 0;
    std::chrono::steady_clock::time_point ready;
    double reduce_scatter_seconds = 0;   // this step's
  };
  void link_piece_gradients();  // after the step's reduce-scatters and flags

  void on_gradient_ready(std::size_t param);
  torch::Tensor gradient_view(Bucket& bucket, std::size_t slot);  // allocates a stage-2 buffer on first use
  void launch_ready_buckets();
  void launch(std::size_t bucket);

  std::vector<torch::Tensor> parameters_;
  ProcessGroupContext& group_;
  ShardedBucketOptions options_;
  std::vector<Bucket> buckets_;
  std::vector<torch::Tensor> shards_;
  std::vector<torch::Tensor> pieces_;
  std::unique_ptr<UnusedParameterFlags> unused_;
  std::vector<std::size_t> bucket_of_, slot_of_;
  std::vector<char> ready_;
  std::size_t next_launch_ = 0;
  std::chrono::steady_clock::time_point backward_started_;  // prepare_step's: backward starts next
  torch::Tensor scale_, loss_;
  bool armed_ = false;
  PhaseRecorder* phases_ = nullptr;
  ShardTraffic traffic_;
  std::mutex mutex_;  // hooks may fire on several autograd threads
  CommThread comm_;   // after the buckets: its jobs touch them, so it joins first
  std::unique_ptr<GradientReadyHooks> hooks_;  // last: no hook fires into a half-destroyed object
};

}  // namespace ddpbench
