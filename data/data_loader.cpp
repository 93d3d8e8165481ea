#include "data/data_loader.h"

#include <numeric>
#include <random>

#include "devices/counting_allocator.h"
#include "base/errors.h"

namespace ddpbench {

EpochSampler::EpochSampler(std::int64_t dataset_size, std::int64_t global_batch, std::uint64_t seed,
                           DataShard shard)
    : dataset_size_(dataset_size), global_batch_(global_batch), seed_(seed), shard_(shard) {
  if (global_batch <= 0 || dataset_size < global_batch) {
    throw UsageError("--dataset-size: " + std::to_string(dataset_size) + " samples cannot fill a global batch of " +
                     std::to_string(global_batch));
  }
  if (shard.count <= 0 || shard.rank < 0 || shard.rank >= shard.count) {
    throw std::invalid_argument("EpochSampler: shard rank " + std::to_string(shard.rank) + " of " +
                                std::to_string(shard.count));
  }
  steps_per_epoch_ = dataset_size / global_batch;  // the incomplete last batch is dropped
}

std::vector<std::int64_t> EpochSampler::permutation(std::int64_t epoch) const {
  std::vector<std::int64_t> perm(static_cast<size_t>(dataset_size_));
  std::iota(perm.begin(), perm.end(), 0);
  // The shuffle depends only on (seed, epoch): every strategy and rank sees the same order.
  std::mt19937_64 rng(seed_ * 0x9E3779B97F4A7C15ULL + static_cast<std::uint64_t>(epoch) + 1);
  for (size_t i = perm.size() - 1; i > 0; --i) {
    std::uniform_int_distribution<size_t> pick(0, i);
    std::swap(perm[i], perm[pick(rng)]);
  }
  return perm;
}

std::vector<std::int64_t> EpochSampler::indices(std::int64_t step) const {
  const std::int64_t epoch = epoch_of(step);
  const std::int64_t within = step % steps_per_epoch_;
  std::lock_guard<std::mutex> lock(cache_->mutex);
  if (epoch != cache_->epoch) {
    cache_->permutation = permutation(epoch);
    cache_->epoch = epoch;
  }
  std::vector<std::int64_t> out;
  out.reserve(static_cast<size_t>(global_batch_ / shard_.count + 1));
  for (std::int64_t i = shard_.rank; i < global_batch_; i += shard_.count) {
    out.push_back(cache_->permutation[static_cast<size_t>(within * global_batch_ + i)]);
  }
  return out;
}

BatchLoader::BatchLoader(const Dataset& dataset, EpochSampler sampler, LoaderOptions options,
                         std::int64_t first_step)
    : dataset_(dataset), sampler_(std::move(sampler)), options_(options), next_step_(first_step) {
  // Each worker's first step is fixed here: read later, from its own thread, next_step_ may already
  // have moved on (the consumer takes batch 0 as soon as it exists), and that step would never come.
  for (int w = 0; w < options_.workers; ++w) {
    workers_.emplace_back([this, first = first_step + w] { worker_loop(first); });
  }
}

BatchLoader::~BatchLoader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  space_.notify_all();
  for (auto& t : workers_) t.join();
}

Batch BatchLoader::assemble(std::int64_t step) const {
  const auto idx = sampler_.indices(step);
  auto index = torch::from_blob(const_cast<std::int64_t*>(idx.data()), {static_cast<std::int64_t>(idx.size())},
                                torch::kInt64);
  Batch b;
  b.step = step;
  b.epoch = sampler_.epoch_of(step);
  // A dataset on a GPU (--data-path device) gathers its batch there, by indices moved there.
  const auto& on_gpu = dataset_.inputs.is_cuda() ? index.to(dataset_.inputs.device()) : index;
  b.inputs = dataset_.inputs.index_select(0, on_gpu);
  b.targets = dataset_.targets.index_select(0, on_gpu);
  if (options_.pin_memory) {
    b.inputs = b.inputs.pin_memory();
    b.targets = b.targets.pin_memory();
  }
  return b;
}

void BatchLoader::worker_loop(std::int64_t first_step) {
  CpuMemoryCounter::DeviceScope host(CpuMemoryCounter::kHost);  // batches live in host memory
  const std::int64_t depth = static_cast<std::int64_t>(options_.workers) * options_.prefetch_per_worker;
  for (std::int64_t step = first_step;; step += options_.workers) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      // Stay at most `depth` steps ahead of the consumer.
      space_.wait(lock, [&] { return stopping_ || step < next_step_ + depth; });
      if (stopping_) return;
    }
    try {
      Batch b = assemble(step);
      std::lock_guard<std::mutex> lock(mutex_);
      done_.emplace(step, std::move(b));
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
    ready_.notify_all();
  }
}

Batch BatchLoader::next() {
  if (workers_.empty()) return assemble(next_step_++);
  std::unique_lock<std::mutex> lock(mutex_);
  ready_.wait(lock, [&] { return error_ || done_.count(next_step_) > 0; });
  if (error_) std::rethrow_exception(error_);
  auto node = done_.extract(next_step_);
  ++next_step_;
  lock.unlock();
  space_.notify_all();
  return std::move(node.mapped());
}

}  // namespace ddpbench
