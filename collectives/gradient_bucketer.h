#pragma once
// The heart of ddp: gradients packed into size-capped buckets, in reverse registration order (the
// order backward produces them), each bucket's all-reduce launched the moment its last gradient is
// ready while backward goes on, then awaited, averaged and unpacked after backward, as PyTorch's
// DDP Reducer does (which cannot be built against Debian's headers).
#include <torch/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "collectives/bucket_plan.h"
#include "collectives/gradient_ready_hooks.h"
#include "collectives/unused_parameters.h"
#include "distributed/process_group.h"
#include "timing/phase_recorder.h"

namespace ddpbench {

struct BucketOptions {
  double cap_mb = 25;          // --bucket-mb: largest bucket, in MiB of gradients
  double first_cap_mb = 1;     // the first bucket (the last layers) is small so communication starts early
  bool overlap = true;         // false (--no-overlap): every all-reduce starts after backward
  bool grad_as_bucket_view = false;  // gradients live inside the buckets: no copy in or out
};

// One communication step's figures, summed over the steps since reset_stats().
struct CommStats {
  std::int64_t steps = 0;
  std::int64_t bytes = 0;         // all-reduced payload
  std::int64_t collectives = 0;
  double busy_seconds = 0;        // union of the all-reduces' launch-to-completion intervals
  std::int64_t launched_during_backward = 0;  // buckets launched from a gradient hook (overlap)
  // Per bucket in launch order, summed over the steps: when its last gradient was ready, from
  // prepare_step (the start of backward), and its all-reduce's launch-to-completion time.
  std::vector<double> ready_seconds;
  std::vector<double> allreduce_seconds;
};

class GradientBucketer {
 public:
  // `parameters` in registration order; every rank must pass the same shapes in the same order.
  GradientBucketer(std::vector<torch::Tensor> parameters, ProcessGroupContext& group, BucketOptions options);
  GradientBucketer(const GradientBucketer&) = delete;
  GradientBucketer& operator=(const GradientBucketer&) = delete;

  // Before backward: this rank's gradients are scaled by `grad_scale` (its share of the global
  // batch) as they enter the buckets, and `loss` (already scaled) rides in the first bucket.
  // Each bucket's all-reduce is an `allreduce` range on `phases` (NVTX, trace) from launch to completion.
  void prepare_step(double grad_scale, const torch::Tensor& loss, PhaseRecorder* phases = nullptr);
  // After backward: launches what is left, waits for every bucket (the exposed communication).
  void wait_all();
  // Copies the reduced buckets back into the gradients (nothing to do for bucket views); returns
  // the global loss. A parameter no rank gave a gradient this step is left without one, as
  // PyTorch's DDP leaves it, so the optimizer skips it (no weight decay, no momentum step).
  torch::Tensor unpack();
  // Readies the gradients for the next step's backward: bucket views are zeroed in place (the
  // buckets live on either way, as in PyTorch's DDP); other gradients are set to none, as PyTorch
  // 2's zero_grad() does, so their memory is not held through the next forward.
  void zero_grad();

  int bucket_count() const { return static_cast<int>(buckets_.size()); }
  // Whether steps after the first all-reduce which parameters each rank used (unused_parameters.h).
  bool tracks_unused_parameters() const { return unused_ && unused_->needed(); }
  std::int64_t bytes_per_step() const;
  // Parameter indices (registration order) of each bucket, in launch order.
  std::vector<std::vector<std::size_t>> bucket_layout() const;
  std::int64_t bucket_bytes(std::size_t bucket) const;
  const CommStats& stats() const { return stats_; }
  void reset_stats() { stats_ = {}; }

 private:
  struct Bucket {
    torch::Tensor flat;                 // gradients of its parameters, then (bucket 0 only) the loss
    std::vector<std::size_t> params;    // indices into parameters_
    std::vector<torch::Tensor> views;   // views of `flat`, one per parameter, shaped like it
    std::int64_t pending = 0;           // gradients still to arrive this step
    c10::intrusive_ptr<c10d::Work> work;
    std::chrono::steady_clock::time_point ready;     // its last gradient arrived
    std::chrono::steady_clock::time_point launched;
    std::atomic<std::int64_t> completed_ns{0};  // set by the work's completion callback
    PhaseRecorder::AsyncRange range;            // ended by the completion callback
  };
  void on_gradient_ready(std::size_t param);
  void launch_ready_buckets();  // in index order, as every rank must
  void launch(Bucket& bucket);
  void mark_ready(Bucket& bucket);  // its pending count reached zero
  bool can_be_bucket_view(std::size_t param) const;  // --grad-as-bucket-view, and its bucket is in its dtype

  std::vector<torch::Tensor> parameters_;
  ProcessGroupContext& group_;
  BucketOptions options_;
  std::vector<std::shared_ptr<Bucket>> buckets_;  // shared with in-flight completion callbacks
  std::vector<std::size_t> bucket_of_;
  std::vector<std::size_t> slot_of_;
  std::unique_ptr<GradientReadyHooks> hooks_;  // declared after buckets_: its hooks go before they do
  std::mutex mutex_;  // hooks may fire on several autograd threads
  std::size_t next_launch_ = 0;
  std::vector<char> ready_;  // which parameters' gradients arrived this step
  std::unique_ptr<UnusedParameterFlags> unused_;  // all-reduced after the buckets
  torch::Tensor scale_;
  bool armed_ = false;
  std::chrono::steady_clock::time_point backward_started_;  // prepare_step's time
  PhaseRecorder* phases_ = nullptr;  // of the step in progress
  std::int64_t loss_offset_ = 0;
  CommStats stats_;
};

}  // namespace ddpbench
