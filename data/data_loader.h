#pragma once
// Batches for the training loop: an epoch-seeded shuffle over an in-memory dataset, sharded across
// ranks, assembled inline or by worker threads ahead of time, optionally into pinned host memory.
#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "workloads/workload.h"

namespace ddpbench {

// The part of each global batch this process consumes: all of it (single, dp) or one rank's share.
struct DataShard {
  int rank = 0;
  int count = 1;
};

// Global batch k of epoch e is positions [k*B, (k+1)*B) of a permutation seeded by (seed, e); a
// shard takes every count-th sample of it from `rank` on, as PyTorch's DistributedSampler does, so
// the union of the shards' batches at a step is exactly the single-process batch of that step.
class EpochSampler {
 public:
  EpochSampler(std::int64_t dataset_size, std::int64_t global_batch, std::uint64_t seed, DataShard shard);
  std::int64_t steps_per_epoch() const { return steps_per_epoch_; }
  std::int64_t epoch_of(std::int64_t step) const { return step / steps_per_epoch_; }
  // Dataset indices for this shard at global step `step` (thread-safe).
  std::vector<std::int64_t> indices(std::int64_t step) const;

 private:
  std::vector<std::int64_t> permutation(std::int64_t epoch) const;

  std::int64_t dataset_size_;
  std::int64_t global_batch_;
  std::uint64_t seed_;
  DataShard shard_;
  std::int64_t steps_per_epoch_;
  // The current epoch's permutation, shared by loader threads (and kept when the sampler moves).
  struct EpochCache {
    std::mutex mutex;
    std::int64_t epoch = -1;
    std::vector<std::int64_t> permutation;
  };
  std::shared_ptr<EpochCache> cache_ = std::make_shared<EpochCache>();
};

struct Batch {
  torch::Tensor inputs;
  torch::Tensor targets;
  std::int64_t step = 0;
  std::int64_t epoch = 0;
};

struct LoaderOptions {
  int workers = 0;           // 0: batches are assembled in the calling thread
  bool pin_memory = false;   // page-locked host memory for faster host-to-GPU copies (CUDA only)
  int prefetch_per_worker = 2;
};

class BatchLoader {
 public:
  BatchLoader(const Dataset& dataset, EpochSampler sampler, LoaderOptions options, std::int64_t first_step = 0);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The batch of the next step, in order. Rethrows a worker's exception.
  Batch next();

 private:
  Batch assemble(std::int64_t step) const;
  void worker_loop(std::int64_t first_step);

  const Dataset& dataset_;
  EpochSampler sampler_;
  LoaderOptions options_;
  std::int64_t next_step_;

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable ready_;
  std::condition_variable space_;
  std::map<std::int64_t, Batch> done_;
  std::exception_ptr error_;
  bool stopping_ = false;
};

}  // namespace ddpbench
