#include "collectives/sharded_buckets.h"

#include <ATen/ops/mul.h>

#include "collectives/shard_collectives.h"
#include "distributed/process_group.h"

namespace ddpbench {

ShardedBuckets::ShardedBuckets(std::vector<torch::Tensor> parameters, ProcessGroupContext& group,
                               ShardedBucketOptions options)
    : parameters_(std::move(parameters)),
      group_(group),
      options_(options),
      comm_(/*inline_jobs=*/group.kind() == DeviceKind::Cuda || !options.overlap) {
  const auto layout = plan_buckets(parameters_, options_.caps);
  bucket_of_.assign(parameters_.size(), 0);
  slot_of_.assign(parameters_.size(), 0);
  const int world = group_.size(), rank = group_.rank();
  torch::NoGradGuard no_grad;
  buckets_.resize(layout.size());
  for (std::size_t b = 0; b < layout.size(); ++b) {
    auto& bucket = buckets_[b];
    bucket.params = layout[b];
    std::int64_t numel = 0;
    for (auto k : bucket.params) {
      bucket.offsets.push_back(numel);
      numel += parameters_[k].numel();
    }
    const auto options = parameters_[bucket.params.front()].options().requires_grad(false);
    const std::int64_t padded = padded_numel(numel, world), chunk = padded / world;
    bucket.flat_params = torch::zeros({padded}, options);
    for (std::size_t s = 0; s < bucket.params.size(); ++s) {
      auto& p = parameters_[bucket.params[s]];
      auto view = bucket.flat_params.narrow(0, bucket.offsets[s], p.numel()).view(p.sizes());
      view.copy_(p);
      p.set_data(view);  // the parameter keeps its autograd identity; its values now live in the bucket
      bucket_of_[bucket.params[s]] = b;
      slot_of_[bucket.params[s]] = s;
    }
    // A tensor of its own over the chunk's storage (not an autograd view), so its .grad can be set.
    bucket.shard = bucket.flat_params.narrow(0, rank * chunk, chunk).detach();
    if (options_.keep_full_gradients) {
      // Stage 1 holds the full buffer anyway: its own chunk is where the reduced gradient lands (an
      // in-place reduce-scatter, as NCCL's; the ring ends by copying chunk r onto itself).
      bucket.flat_grads = torch::zeros({padded}, options);
      bucket.grad_shard = bucket.flat_grads.narrow(0, rank * chunk, chunk);
    } else {
      bucket.grad_shard = torch::zeros({chunk}, options);
    }
    bucket.shard.mutable_grad() = bucket.grad_shard;
    shards_.push_back(bucket.shard);
    std::vector<std::int64_t> numels;
    for (auto k : bucket.params) numels.push_back(parameters_[k].numel());
    bucket.pieces = std::make_unique<ShardPieces>(bucket.shard, rank * chunk, bucket.params, bucket.offsets, numels);
    pieces_.insert(pieces_.end(), bucket.pieces->tensors().begin(), bucket.pieces->tensors().end());
  }
  loss_ = torch::zeros({1}, buckets_.front().flat_params.options());
  unused_ = std::make_unique<UnusedParameterFlags>(parameters_.size(), loss_);
  link_piece_gradients();
  hooks_ = std::make_unique<GradientReadyHooks>(parameters_, [this](std::size_t k) { on_gradient_ready(k); });
}

ShardedBuckets::~ShardedBuckets() = default;

std::int64_t ShardedBuckets::padded_bytes() const {
  std::int64_t bytes = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) bytes += bucket_bytes(b);
  return bytes;
}

std::int64_t ShardedBuckets::bucket_bytes(std::size_t bucket) const {
  const auto& flat = buckets_.at(bucket).flat_params;
  return flat.numel() * static_cast<std::int64_t>(flat.element_size());
}

std::int64_t ShardedBuckets::gradient_bytes_held() const {
  std::int64_t bytes = 0;
  for (const auto& b : buckets_) {
    if (b.flat_grads.defined()) bytes += b.flat_grads.numel() * static_cast<std::int64_t>(b.flat_grads.element_size());
    if (!options_.keep_full_gradients && b.grad_shard.defined())
      bytes += b.grad_shard.numel() * static_cast<std::int64_t>(b.grad_shard.element_size());
  }
  return bytes;
}

void ShardedBuckets::free_gradients() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.keep_full_gradients) return;
  for (auto& b : buckets_) {
    b.grad_shard = torch::Tensor();
    b.shard.mutable_grad() = torch::Tensor();
    b.pieces->link(torch::Tensor(), [](std::size_t) { return false; });
  }
}

void ShardedBuckets::link_piece_gradients() {
  for (auto& b : buckets_) b.pieces->link(b.grad_shard, [this](std::size_t k) { return unused_->unused(k); });
}

void ShardedBuckets::prepare_step(double grad_scale, const torch::Tensor& loss, PhaseRecorder* phases,
                                  bool add_to_gradients) {
  std::lock_guard<std::mutex> lock(mutex_);
  phases_ = phases;
  if (add_to_gradients) {
    torch::NoGradGuard no_grad;
    for (auto& b : buckets_) {
      if (!b.grad_shard.defined()) continue;
      if (options_.keep_full_gradients) {
        b.carried = b.grad_shard.clone();
      } else {  // stage 2: the chunk itself; launch() allocates this round's
        b.carried = b.grad_shard;
        b.grad_shard = torch::Tensor();
        b.shard.mutable_grad() = torch::Tensor();
      }
    }
  }
  scale_ = torch::scalar_tensor(grad_scale, buckets_.front().flat_params.options());
  for (auto& b : buckets_) {
    b.pending = static_cast<std::int64_t>(b.params.size());
    b.reduce_scatter_seconds = 0;
  }
  ready_.assign(parameters_.size(), 0);
  next_launch_ = 0;
  loss_.copy_(loss.detach().reshape({1}));
  armed_ = true;
  backward_started_ = std::chrono::steady_clock::now();
}

torch::Tensor ShardedBuckets::gradient_view(Bucket& bucket, std::size_t slot) {
  if (!bucket.flat_grads.defined()) {
    // Every parameter's slot is written this step (its gradient, or zeros for one that got none), so
    // only the padding needs zeroing: it must add nothing to the sums.
    bucket.flat_grads = torch::empty_like(bucket.flat_params);
    const std::int64_t used = bucket.offsets.back() + parameters_[bucket.params.back()].numel();
    bucket.flat_grads.narrow(0, used, bucket.flat_grads.numel() - used).zero_();
  }
  const auto& p = parameters_[bucket.params[slot]];
  return bucket.flat_grads.narrow(0, bucket.offsets[slot], p.numel()).view(p.sizes());
}

void ShardedBuckets::on_gradient_ready(std::size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || ready_[param]) return;  // outside a step, or a second accumulation (none in ddpbench)
  ready_[param] = 1;
  auto& bucket = buckets_[bucket_of_[param]];
  auto& p = parameters_[param];
  {
    torch::NoGradGuard no_grad;
    const auto& grad = p.grad();
    if (!options_.keep_full_gradients && bucket.params.size() == 1 && !bucket.flat_grads.defined() &&
        bucket.flat_params.numel() == grad.numel() && grad.is_contiguous()) {
      // Stage 2, a bucket of one parameter that needs no padding (often the largest): autograd's own
      // gradient, weighted in place, is the buffer reduce-scattered, so no second whole copy of it
      // ever exists. The parameter lets go of it below; the bucket frees it once reduce-scattered.
      bucket.flat_grads = grad.view({-1}).mul_(scale_);
    } else {
      auto view = gradient_view(bucket, slot_of_[param]);
      at::mul_out(view, grad, scale_);  // copy and weight in one pass
    }
  }
  p.mutable_grad() = torch::Tensor();  // the bucket holds it now: autograd's copy is freed
  if (--bucket.pending == 0) bucket.ready = std::chrono::steady_clock::now();
  if (bucket.pending == 0 && options_.overlap) {
    const std::size_t before = next_launch_;
    launch_ready_buckets();
    traffic_.launched_during_backward += static_cast<std::int64_t>(next_launch_ - before);
  }
}

void ShardedBuckets::launch_ready_buckets() {
  // Every rank must post the same collectives in the same order: strictly bucket by bucket.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].pending == 0) launch(next_launch_++);
}

void ShardedBuckets::launch(std::size_t b) {
  auto& bucket = buckets_[b];
  auto range = phases_ ? phases_->begin_async("reduce_scatter") : PhaseRecorder::AsyncRange{};
  comm_.post([this, &bucket, b, range] {
    if (!bucket.grad_shard.defined()) {
      // Stage 2's chunk, allocated just before the collective (sharded_units.cpp says why); every
      // element is written by the reduce-scatter.
      bucket.grad_shard = torch::empty({bucket.shard.numel()}, bucket.shard.options());
      bucket.shard.mutable_grad() = bucket.grad_shard;
    }
    const auto cost = reduce_scatter(group_, bucket.flat_grads, bucket.grad_shard,
                                     "reduce-scatter of gradient bucket " + std::to_string(b));
    if (bucket.carried.defined()) {
      bucket.grad_shard.add_(bucket.carried);
      bucket.carried = torch::Tensor();
    }
    PhaseRecorder::end_async(range);
    bucket.reduce_scatter_seconds = cost.seconds;
    if (!options_.keep_full_gradients) bucket.flat_grads = torch::Tensor();  // stage 2: only the chunk stays
  });
}

torch::Tensor ShardedBuckets::wait_reduce_scatter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) throw std::logic_error("ShardedBuckets::wait_reduce_scatter without prepare_step");
    torch::NoGradGuard no_grad;
    // A parameter that took no part in this backward still owes its bucket a (zero) gradient.
    for (std::size_t k = 0; k < parameters_.size(); ++k) {
      if (ready_[k]) continue;
      auto& bucket = buckets_[bucket_of_[k]];
      gradient_view(bucket, slot_of_[k]).zero_();
      if (--bucket.pending == 0) bucket.ready = std::chrono::steady_clock::now();
    }
    launch_ready_buckets();
    armed_ = false;
  }
  // The loss, then the used-parameter flags where this step needs them, after the buckets on the
  // same thread: one order of collectives on every rank.
  std::int64_t flag_bytes = 0;
  comm_.post([this, &flag_bytes] {
    group_.allreduce(loss_, "all-reduce of the step's loss");
    if (unused_->needed()) flag_bytes = unused_->reduce(ready_, group_);
  });
  comm_.drain();
  link_piece_gradients();
  traffic_.steps += 1;
  traffic_.reduce_scatter_bytes += padded_bytes();
  traffic_.allreduce_bytes += loss_.numel() * static_cast<std::int64_t>(loss_.element_size()) + flag_bytes;
  traffic_.ready_seconds.resize(buckets_.size(), 0.0);
  traffic_.bucket_reduce_scatter_seconds.resize(buckets_.size(), 0.0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    traffic_.reduce_scatter_seconds += buckets_[b].reduce_scatter_seconds;
    traffic_.bucket_reduce_scatter_seconds[b] += buckets_[b].reduce_scatter_seconds;
    traffic_.ready_seconds[b] += std::chrono::duration<double>(buckets_[b].ready - backward_started_).count();
  }
  return loss_.clone().reshape({});
}

void ShardedBuckets::all_gather_parameters() {
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    auto range = phases_ ? phases_->begin_async("all_gather") : PhaseRecorder::AsyncRange{};
    const auto cost = all_gather(group_, bucket.shard, bucket.flat_params,
                                 "all-gather of parameter bucket " + std::to_string(b));
    PhaseRecorder::end_async(range);
    traffic_.all_gather_seconds += cost.seconds;
  }
  traffic_.all_gather_bytes += padded_bytes();
}

}  // namespace ddpbench
