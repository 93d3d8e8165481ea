#include "collectives/gradient_bucketer.h"

#include <ATen/ops/mul.h>

#include <algorithm>
#include <thread>

#include "compat/c10d_compat.h"

namespace ddpbench {
namespace {

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string mib(std::int64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f MiB", static_cast<double>(bytes) / (1 << 20));
  return text;
}

}  // namespace

GradientBucketer::GradientBucketer(std::vector<torch::Tensor> parameters, ProcessGroupContext& group,
                                   BucketOptions options)
    : parameters_(std::move(parameters)), group_(group), options_(options) {
  if (parameters_.empty()) throw std::invalid_argument("GradientBucketer: no parameters");
  bucket_of_.assign(parameters_.size(), 0);
  slot_of_.assign(parameters_.size(), 0);

  const auto layout = plan_buckets(parameters_, {options_.cap_mb, options_.first_cap_mb});
  for (std::size_t b = 0; b < layout.size(); ++b) {
    auto bucket = std::make_shared<Bucket>();
    bucket->params = layout[b];
    std::int64_t numel = 0;
    for (auto k : bucket->params) numel += parameters_[k].numel();
    if (b == 0) loss_offset_ = numel;
    const auto& first = parameters_[bucket->params.front()];
    // A dtype the backend cannot reduce (1.13's Gloo has no bfloat16) is reduced in float32, as
    // FSDP2's reduce_dtype: the gradients are widened into the bucket and narrowed back out of it.
    const bool widen = first.scalar_type() == torch::kBFloat16 && group_.kind() == DeviceKind::Cpu && !compat::gloo_sends_bf16();
    bucket->flat = torch::zeros({numel + (b == 0 ? 1 : 0)}, first.options().requires_grad(false).dtype(widen ? torch::kFloat : first.scalar_type()));
    std::int64_t offset = 0;
    for (std::size_t s = 0; s < bucket->params.size(); ++s) {
      const auto k = bucket->params[s];
      const auto& p = parameters_[k];
      bucket->views.push_back(bucket->flat.narrow(0, offset, p.numel()).view(p.sizes()));
      offset += p.numel();
      bucket_of_[k] = b;
      slot_of_[k] = s;
    }
    buckets_.push_back(std::move(bucket));
  }

  for (std::size_t k = 0; k < parameters_.size(); ++k) {
    if (can_be_bucket_view(k)) parameters_[k].mutable_grad() = buckets_[bucket_of_[k]]->views[slot_of_[k]];
  }
  hooks_ = std::make_unique<GradientReadyHooks>(parameters_, [this](std::size_t k) { on_gradient_ready(k); });
  unused_ = std::make_unique<UnusedParameterFlags>(parameters_.size(), buckets_[0]->flat);
}

std::int64_t GradientBucketer::bytes_per_step() const {
  std::int64_t bytes = 0;
  for (std::size_t b = 0; b < buckets_.size(); ++b) bytes += bucket_bytes(b);
  return bytes;
}

std::int64_t GradientBucketer::bucket_bytes(std::size_t bucket) const {
  const auto& flat = buckets_.at(bucket)->flat;
  return flat.numel() * static_cast<std::int64_t>(flat.element_size());
}

bool GradientBucketer::can_be_bucket_view(std::size_t k) const {
  return options_.grad_as_bucket_view &&
         buckets_[bucket_of_[k]]->flat.scalar_type() == parameters_[k].scalar_type();  // not a widened bucket
}

void GradientBucketer::mark_ready(Bucket& bucket) { bucket.ready = std::chrono::steady_clock::now(); }

std::vector<std::vector<std::size_t>> GradientBucketer::bucket_layout() const {
  std::vector<std::vector<std::size_t>> layout;
  for (const auto& b : buckets_) layout.push_back(b->params);
  return layout;
}

void GradientBucketer::prepare_step(double grad_scale, const torch::Tensor& loss, PhaseRecorder* phases) {
  std::lock_guard<std::mutex> lock(mutex_);
  phases_ = phases;
  scale_ = torch::scalar_tensor(grad_scale, buckets_[0]->flat.options());
  for (auto& b : buckets_) {
    b->pending = static_cast<std::int64_t>(b->params.size());
    b->work.reset();
    b->completed_ns = 0;
  }
  next_launch_ = 0;
  ready_.assign(parameters_.size(), 0);
  buckets_[0]->flat.narrow(0, loss_offset_, 1).copy_(loss.detach().reshape({1}));
  armed_ = true;
  backward_started_ = std::chrono::steady_clock::now();
}

void GradientBucketer::on_gradient_ready(std::size_t param) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || ready_[param]) return;  // outside a ddp step, or a second accumulation (none in ddpbench)
  ready_[param] = 1;
  auto& bucket = *buckets_[bucket_of_[param]];
  auto& view = bucket.views[slot_of_[param]];
  const auto& grad = parameters_[param].grad();
  torch::NoGradGuard no_grad;
  if (options_.grad_as_bucket_view && grad.defined() && grad.data_ptr() == view.data_ptr()) {
    view.mul_(scale_);  // accumulated in place already: only the averaging is left
  } else {
    at::mul_out(view, grad, scale_);  // copy and average in one pass
  }
  if (--bucket.pending == 0) mark_ready(bucket);
  if (bucket.pending == 0 && options_.overlap) {
    const std::size_t before = next_launch_;
    launch_ready_buckets();
    stats_.launched_during_backward += static_cast<std::int64_t>(next_launch_ - before);
  }
}

void GradientBucketer::launch_ready_buckets() {
  // Every rank must issue the same collectives in the same order: strictly bucket by bucket.
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) launch(*buckets_[next_launch_++]);
}

void GradientBucketer::launch(Bucket& bucket) {
  bucket.launched = std::chrono::steady_clock::now();
  bucket.range = phases_ ? phases_->begin_async("allreduce") : PhaseRecorder::AsyncRange{};
  bucket.work = group_.allreduce_async(bucket.flat);
  // The callback keeps the bucket alive: after a failed step it may fire after the bucketer is gone.
  std::shared_ptr<Bucket> target;
  for (const auto& b : buckets_) {
    if (b.get() == &bucket) target = b;
  }
  bucket.work->getFuture()->addCallback([target](c10::ivalue::Future&) {
    PhaseRecorder::end_async(target->range);  // before completed_ns: wait_all waits for that
    target->completed_ns = now_ns();
  });
}

void GradientBucketer::wait_all() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) throw std::logic_error("GradientBucketer::wait_all without prepare_step");
    torch::NoGradGuard no_grad;
    // A parameter that took no part in this backward still owes its bucket a (zero) gradient.
    for (std::size_t k = 0; k < parameters_.size(); ++k) {
      if (ready_[k]) continue;
      auto& bucket = *buckets_[bucket_of_[k]];
      bucket.views[slot_of_[k]].zero_();
      if (--bucket.pending == 0) mark_ready(bucket);
    }
    launch_ready_buckets();
    armed_ = false;
  }
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = *buckets_[b];
    group_.wait(bucket.work, "all-reduce of bucket " + std::to_string(b) + " (" +
                                 mib(bucket.flat.numel() * static_cast<std::int64_t>(bucket.flat.element_size())) + ")");
  }
  // After the buckets, in the same place on every rank: the collectives keep one order.
  const std::int64_t flag_bytes = unused_->needed() ? unused_->reduce(ready_, group_) : 0;
  // Completion callbacks run right after the waiters wake; give them a moment to land.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  double busy = 0;
  std::int64_t busy_end_ns = 0;
  stats_.ready_seconds.resize(buckets_.size(), 0.0);
  stats_.allreduce_seconds.resize(buckets_.size(), 0.0);
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    auto& bucket = buckets_[b];
    while (bucket->completed_ns.load() == 0 && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    const std::int64_t start =
        std::chrono::duration_cast<std::chrono::nanoseconds>(bucket->launched.time_since_epoch()).count();
    const std::int64_t end = std::max(bucket->completed_ns.load(), start);
    stats_.ready_seconds[b] += std::chrono::duration<double>(bucket->ready - backward_started_).count();
    stats_.allreduce_seconds[b] += static_cast<double>(end - start) * 1e-9;
    const std::int64_t from = std::max(start, busy_end_ns);  // union of the intervals
    if (end > from) busy += static_cast<double>(end - from) * 1e-9;
    busy_end_ns = std::max(busy_end_ns, end);
  }
  stats_.steps += 1;
  stats_.bytes += bytes_per_step() + flag_bytes;
  stats_.collectives += static_cast<std::int64_t>(buckets_.size()) + (flag_bytes > 0 ? 1 : 0);
  stats_.busy_seconds += busy;
}

torch::Tensor GradientBucketer::unpack() {
  torch::NoGradGuard no_grad;
  for (std::size_t k = 0; k < parameters_.size(); ++k) {
    auto& p = parameters_[k];
    const auto& view = buckets_[bucket_of_[k]]->views[slot_of_[k]];
    if (unused_->unused(k)) {
      p.mutable_grad() = torch::Tensor();  // zero_grad() gives a bucket view back before the next step
      continue;
    }
    if (p.grad().defined() && p.grad().data_ptr() == view.data_ptr()) continue;  // a bucket view: reduced in place
    if (p.grad().defined()) {
      p.mutable_grad().copy_(view);
    } else {
      p.mutable_grad() = view.scalar_type() == p.scalar_type() ? view.clone() : view.to(p.scalar_type());
    }
  }
  return buckets_[0]->flat.narrow(0, loss_offset_, 1).clone().reshape({});
}

void GradientBucketer::zero_grad() {
  torch::NoGradGuard no_grad;
  if (options_.grad_as_bucket_view) {
    for (auto& b : buckets_) b->flat.zero_();
    for (std::size_t k = 0; k < parameters_.size(); ++k) {
      const auto& view = buckets_[bucket_of_[k]]->views[slot_of_[k]];
      if (!can_be_bucket_view(k)) {
        parameters_[k].mutable_grad() = torch::Tensor();
      } else if (!parameters_[k].grad().defined() || parameters_[k].grad().data_ptr() != view.data_ptr()) {
        parameters_[k].mutable_grad() = view;
      }
    }
    return;
  }
  for (auto& p : parameters_) p.mutable_grad() = torch::Tensor();
}

}  // namespace ddpbench
