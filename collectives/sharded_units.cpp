#include "collectives/sharded_units.h"

#include <ATen/ops/mul.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>

#include "collectives/shard_collectives.h"
#include "distributed/process_group.h"

namespace ddpbench {
namespace {

std::int64_t bytes_of(const torch::Tensor& t) { return t.numel() * static_cast<std::int64_t>(t.element_size()); }

// The memory under a full buffer goes, its storage object (which the parameters' views and autograd's
// saved tensors share) stays, as FSDP2's storage().resize_(0).
void release_storage(const torch::Tensor& buffer) {
  c10::StorageImpl* storage = buffer.storage().unsafeGetStorageImpl();
  storage->set_data_ptr_noswap(c10::DataPtr(nullptr, buffer.device()));
  storage->set_nbytes(0);
}

void allocate_storage(const torch::Tensor& buffer) {
  c10::StorageImpl* storage = buffer.storage().unsafeGetStorageImpl();
  const auto nbytes = static_cast<std::size_t>(bytes_of(buffer));
  storage->set_data_ptr_noswap(storage->allocator()->allocate(nbytes));
  storage->set_nbytes(nbytes);
}

}  // namespace

ShardedUnits::ShardedUnits(std::vector<torch::Tensor> parameters, std::vector<std::vector<std::size_t>> units,
                           ProcessGroupContext& group, ShardedUnitOptions options)
    : parameters_(std::move(parameters)),
      group_(group),
      options_(options),
      comm_(/*inline_jobs=*/group.kind() == DeviceKind::Cuda || !options.overlap) {
  if (parameters_.empty()) throw std::logic_error("ShardedUnits: a model without parameters");
  if (options_.gradients_at_finish && options_.gather_dtype) {
    throw std::logic_error("ShardedUnits: gradients_at_finish with a gather dtype of its own");
  }
  constexpr std::size_t kNone = static_cast<std::size_t>(-1);
  unit_of_.assign(parameters_.size(), kNone);
  slot_of_.assign(parameters_.size(), 0);
  for (std::size_t u = 0; u < units.size(); ++u) {
    for (auto k : units[u]) {
      if (k >= parameters_.size()) throw std::logic_error("ShardedUnits: a unit names a parameter out of range");
      if (unit_of_[k] != kNone) throw std::logic_error("ShardedUnits: a parameter in two units");
      unit_of_[k] = u;
    }
  }
  std::vector<std::size_t> root;
  for (std::size_t k = 0; k < parameters_.size(); ++k)
    if (unit_of_[k] == kNone) root.push_back(k);
  for (auto& u : units)
    if (u.empty()) throw std::logic_error("ShardedUnits: a unit without parameters");
  if (!root.empty()) {
    for (auto k : root) unit_of_[k] = units.size();
    units.push_back(root);
  }

  const int world = group_.size(), rank = group_.rank();
  torch::NoGradGuard no_grad;
  units_.resize(units.size());
  for (std::size_t u = 0; u < units.size(); ++u) {
    auto& unit = units_[u];
    unit.root = !root.empty() && u + 1 == units.size();
    unit.params = units[u];
    std::int64_t numel = 0;
    for (std::size_t s = 0; s < unit.params.size(); ++s) {
      unit.offsets.push_back(numel);
      numel += parameters_[unit.params[s]].numel();
      slot_of_[unit.params[s]] = s;
    }
    unit.numel = padded_numel(numel, world);
    const std::int64_t chunk = unit.numel / world;
    const auto options = parameters_[unit.params.front()].options().requires_grad(false);
    auto flat = torch::zeros({unit.numel}, options);
    for (std::size_t s = 0; s < unit.params.size(); ++s) {
      const auto& p = parameters_[unit.params[s]];
      flat.narrow(0, unit.offsets[s], p.numel()).view(p.sizes()).copy_(p);
    }
    unit.shard = flat.narrow(0, rank * chunk, chunk).clone();
    unit.grad_shard = torch::zeros({chunk}, options);
    unit.shard.mutable_grad() = unit.grad_shard;
    shards_.push_back(unit.shard);
    std::vector<std::int64_t> numels;
    for (auto k : unit.params) numels.push_back(parameters_[k].numel());
    unit.pieces = std::make_unique<ShardPieces>(unit.shard, rank * chunk, unit.params, unit.offsets, numels);
    pieces_.insert(pieces_.end(), unit.pieces->tensors().begin(), unit.pieces->tensors().end());
    unit.full = torch::empty({unit.numel}, options.dtype(options_.gather_dtype.value_or(options.dtype().toScalarType())));
    for (std::size_t s = 0; s < unit.params.size(); ++s) {
      auto& p = parameters_[unit.params[s]];
      p.set_data(unit.full.narrow(0, unit.offsets[s], p.numel()).view(p.sizes()));
    }
    release_storage(unit.full);
  }
  loss_ = torch::zeros({1}, units_.front().shard.options());
  unused_ = std::make_unique<UnusedParameterFlags>(parameters_.size(), loss_);
  link_piece_gradients();
  hooks_ = std::make_unique<GradientReadyHooks>(parameters_, [this](std::size_t k) { on_gradient_ready(k); });
}

ShardedUnits::~ShardedUnits() = default;

std::int64_t ShardedUnits::unit_numel(std::size_t unit) const { return units_.at(unit).numel; }

std::int64_t ShardedUnits::unit_bytes(std::size_t unit) const {
  const auto& u = units_.at(unit);
  return u.numel * static_cast<std::int64_t>(u.shard.element_size());
}

std::int64_t ShardedUnits::padded_bytes() const {
  std::int64_t bytes = 0;
  for (const auto& u : units_) bytes += u.numel * static_cast<std::int64_t>(u.shard.element_size());
  return bytes;
}

std::int64_t ShardedUnits::full_parameter_bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t bytes = 0;
  for (const auto& u : units_) bytes += static_cast<std::int64_t>(u.full.storage().nbytes());
  return bytes;
}

std::int64_t ShardedUnits::gradient_bytes_held() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t bytes = 0;
  for (const auto& u : units_) {
    if (u.grad_shard.defined()) bytes += bytes_of(u.grad_shard);
    if (u.flat_grads.defined()) bytes += bytes_of(u.flat_grads);
  }
  return bytes;
}

void ShardedUnits::post_gather(std::size_t u) {
  auto& unit = units_[u];
  allocate_storage(unit.full);
  unit.held = Held::Gathering;
  auto range = phases_ ? phases_->begin_async("all_gather") : PhaseRecorder::AsyncRange{};
  unit.gather_ticket = comm_.post([this, u, range] {
    auto& unit = units_[u];
    torch::NoGradGuard no_grad;
    // Mixed precision: the chunk is cast to the gather dtype, so the bytes sent are the cast's.
    const auto input = unit.shard.scalar_type() == unit.full.scalar_type() ? unit.shard : unit.shard.to(unit.full.scalar_type());
    const auto cost = all_gather(group_, input, unit.full, "all-gather of parameter unit " + std::to_string(u));
    PhaseRecorder::end_async(range);
    unit.all_gather_seconds += cost.seconds;
  });
  traffic_.all_gather_bytes += bytes_of(unit.full);
  traffic_.collectives += 1;
}

void ShardedUnits::ensure_gathered(std::size_t u) {
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& unit = units_[u];
    if (unit.held == Held::Gathered) return;
    if (unit.held == Held::Freed) post_gather(u);
    ticket = unit.gather_ticket;
  }
  {
    // What the step waits for here is all-gather nothing hid: the prefetch came too late, or none.
    std::optional<PhaseRecorder::Scope> exposed;
    if (phases_) exposed.emplace(*phases_, Phase::AllGatherExposed);
    comm_.wait(ticket);
  }
  std::lock_guard<std::mutex> lock(mutex_);
  units_[u].held = Held::Gathered;
}

void ShardedUnits::free_full(std::size_t u) {
  auto& unit = units_[u];
  if (unit.held == Held::Freed) return;
  if (unit.held == Held::Gathering) throw std::logic_error("ShardedUnits: freeing a unit whose all-gather is in flight");
  release_storage(unit.full);
  unit.held = Held::Freed;
}

void ShardedUnits::free_gradients() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& u : units_) {
    u.grad_shard = torch::Tensor();
    u.shard.mutable_grad() = torch::Tensor();
    u.pieces->link(torch::Tensor(), [](std::size_t) { return false; });
  }
}

void ShardedUnits::link_piece_gradients() {
  for (auto& u : units_) u.pieces->link(u.grad_shard, [this](std::size_t k) { return unused_->unused(k); });
}

void ShardedUnits::begin_step(double grad_scale, PhaseRecorder* phases, bool add_to_gradients) {
  // Launching the first all-gathers (allocating their buffers) and waiting for the root's: all-gather
  // work nothing hides, so the step's time here is in a phase, as FSDP2's pre-forward unshard.
  std::optional<PhaseRecorder::Scope> exposed;
  if (phases) exposed.emplace(*phases, Phase::AllGatherExposed);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    phases_ = phases;
    add_to_gradients_ = add_to_gradients;
    scale_ = torch::scalar_tensor(grad_scale, units_.front().shard.options());
    for (auto& u : units_) {
      u.pending = static_cast<std::int64_t>(u.params.size());
      u.forward_position = -1;
      u.reduce_scatter_seconds = 0;
      u.all_gather_seconds = 0;
      u.launched = false;
    }
    ready_.assign(parameters_.size(), 0);
    forward_order_.clear();
    loss_.zero_();
    armed_ = true;
    if (options_.gradients_at_finish) {
      // Backward accumulates into the units' buffers in place, micro-batch after micro-batch.
      for (auto& unit : units_) {
        unit.flat_grads = torch::zeros({unit.numel}, unit.shard.options());
        for (std::size_t s = 0; s < unit.params.size(); ++s) {
          auto& p = parameters_[unit.params[s]];
          p.mutable_grad() = unit.flat_grads.narrow(0, unit.offsets[s], p.numel()).view(p.sizes());
        }
      }
    }
    if (units_.back().root) post_gather(units_.size() - 1);
    // The first unit's all-gather goes out with the root's, before forward needs it.
    if (options_.prefetch && !units_.front().root && units_.front().held == Held::Freed) post_gather(0);
  }
  if (units_.back().root) ensure_gathered(units_.size() - 1);
}

void ShardedUnits::set_loss(const torch::Tensor& loss) {
  torch::NoGradGuard no_grad;
  loss_.copy_(loss.detach().reshape({1}));
}

void ShardedUnits::before_forward(std::size_t u) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& unit = units_.at(u);
    if (unit.forward_position < 0) {
      unit.forward_position = static_cast<int>(forward_order_.size());
      forward_order_.push_back(u);
    }
  }
  ensure_gathered(u);
  // Prefetch: the next unit's all-gather runs while this one computes.
  if (options_.prefetch && u + 1 < units_.size() && !units_[u + 1].root) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (units_[u + 1].held == Held::Freed && units_[u + 1].forward_position < 0) post_gather(u + 1);
  }
}

void ShardedUnits::after_forward(std::size_t u) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (options_.reshard_after_forward && !units_.at(u).root) free_full(u);
}

void ShardedUnits::before_backward(std::size_t u) {
  ensure_gathered(u);
  if (!options_.prefetch) return;
  std::lock_guard<std::mutex> lock(mutex_);
  // Prefetch: the unit that ran before this one in forward is the next to run backward.
  const int position = units_.at(u).forward_position;
  if (position <= 0) return;
  const auto previous = forward_order_[static_cast<std::size_t>(position - 1)];
  if (units_[previous].held == Held::Freed && units_[previous].pending > 0) post_gather(previous);
}

void ShardedUnits::move_gradient_in(Unit& unit, std::size_t slot) {
  torch::NoGradGuard no_grad;
  auto& p = parameters_[unit.params[slot]];
  auto view = unit.flat_grads.narrow(0, unit.offsets[slot], p.numel()).view(p.sizes());
  if (ready_[unit.params[slot]] && p.grad().defined()) {
    at::mul_out(view, p.grad(), scale_);  // copy, weight and (bf16) widen in one pass
    p.mutable_grad() = torch::Tensor();   // the unit's buffer holds it now: autograd's copy is freed
  } else {
    view.zero_();  // a parameter with no gradient yet (the root's) or none this backward adds nothing
  }
}

void ShardedUnits::fill_gradient_buffer(std::size_t u) {
  auto& unit = units_[u];
  // Every parameter's slot is written below, so only the padding needs zeroing: it must add nothing
  // to the sums.
  unit.flat_grads = torch::empty({unit.numel}, unit.shard.options());
  const auto& last = parameters_[unit.params.back()];
  const std::int64_t used = unit.offsets.back() + last.numel();
  unit.flat_grads.narrow(0, used, unit.numel - used).zero_();
  for (std::size_t s = 0; s < unit.params.size(); ++s) move_gradient_in(unit, s);
}

void ShardedUnits::on_gradient_ready(std::size_t param) {
  if (options_.gradients_at_finish) return;  // autograd accumulates them; finish_backward() takes them
  std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_ || ready_[param]) return;  // outside a step, or a second accumulation (none in ddpbench)
  ready_[param] = 1;
  const auto u = unit_of_[param];
  auto& unit = units_[u];
  // Autograd's gradient stays the parameter's .grad until the unit's last one has come. Then the
  // unit's full parameters go first and its gradient buffer is made after, as FSDP2's post-backward
  // does, so a unit's parameters, its gradients and its buffer are never whole at once (copying each
  // gradient as it came held all three at the unit's last one). The root's parameters stay for the
  // whole step, so its gradients are copied as they come, one at a time beside its buffer.
  if (unit.root) {
    if (!unit.flat_grads.defined()) {
      fill_gradient_buffer(u);  // this gradient, and zeros in the slots of those still to come
    } else {
      move_gradient_in(unit, slot_of_[param]);
    }
  }
  if (--unit.pending > 0) return;
  if (!unit.root) {
    if (unit.held == Held::Gathered) free_full(u);
    fill_gradient_buffer(u);
  }
  if (options_.overlap) launch_reduce_scatter(u);
}

void ShardedUnits::launch_reduce_scatter(std::size_t u) {
  auto& unit = units_[u];
  unit.launched = true;
  auto range = phases_ ? phases_->begin_async("reduce_scatter") : PhaseRecorder::AsyncRange{};
  const bool add = add_to_gradients_;
  comm_.post([this, &unit, u, range, add] {
    // This rank's gradient chunk is allocated here, just before the collective: on the
    // communication thread that is mostly after the hook that posted the job has returned and freed
    // autograd's copies of the unit's gradients (FSDP2 too allocates the reduce-scatter's output
    // after the unit's gradients are in its input). Adding to an earlier micro-batch's chunk, the
    // collective writes a chunk of its own first.
    const bool adding = add && unit.grad_shard.defined();
    torch::Tensor output = adding ? torch::empty({unit.shard.numel()}, unit.shard.options()) : unit.grad_shard;
    if (!output.defined()) {
      unit.grad_shard = output = torch::empty({unit.shard.numel()}, unit.shard.options());
      unit.shard.mutable_grad() = unit.grad_shard;
    }
    const auto cost = reduce_scatter(group_, unit.flat_grads, output, "reduce-scatter of gradient unit " + std::to_string(u));
    if (adding) {
      torch::NoGradGuard no_grad;
      unit.grad_shard.add_(output);
    }
    PhaseRecorder::end_async(range);
    unit.reduce_scatter_seconds = cost.seconds;
    unit.flat_grads = torch::Tensor();  // only the chunk stays
  });
}

torch::Tensor ShardedUnits::finish_backward() {
  std::int64_t flag_bytes = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!armed_) throw std::logic_error("ShardedUnits::finish_backward without begin_step");
    if (options_.gradients_at_finish) {
      // Every gradient is in its unit's buffer already (zeros for a parameter backward never
      // reached: each counts as used): weighted in place, and the parameters let go of their views.
      torch::NoGradGuard no_grad;
      for (auto& unit : units_) {
        unit.pending = 0;
        unit.flat_grads.mul_(scale_);
        for (auto k : unit.params) parameters_[k].mutable_grad() = torch::Tensor();
      }
      std::fill(ready_.begin(), ready_.end(), 1);
    }
    // A unit with a parameter that took no part in this backward is filled now: its gradients so far,
    // zeros for the rest.
    for (std::size_t u = 0; u < units_.size(); ++u) {
      auto& unit = units_[u];
      if (unit.pending == 0) continue;
      unit.pending = 0;
      if (!unit.root && unit.held == Held::Gathered) free_full(u);
      if (!unit.root || !unit.flat_grads.defined()) fill_gradient_buffer(u);
    }
    // Units not launched yet, in unit order (the same on every rank): all of them with --no-overlap.
    for (std::size_t u = 0; u < units_.size(); ++u)
      if (!units_[u].launched) launch_reduce_scatter(u);
    armed_ = false;
  }
  {
    std::optional<PhaseRecorder::Scope> exposed;
    if (phases_) exposed.emplace(*phases_, Phase::ReduceScatterExposed);
    // The loss, then the used-parameter flags where this step needs them, after the units on the
    // same thread: one order of collectives on every rank.
    comm_.post([this, &flag_bytes] {
      group_.allreduce(loss_, "all-reduce of the step's loss");
      if (unused_->needed()) flag_bytes = unused_->reduce(ready_, group_);
    });
    comm_.drain();
  }
  // Freeing the full parameters left (munmap of large buffers) ends backward, as FSDP2's post-backward
  // reshard: in a phase, so that the step's time is all accounted for.
  std::optional<PhaseRecorder::Scope> reshard;
  if (phases_) reshard.emplace(*phases_, Phase::Backward);
  std::lock_guard<std::mutex> lock(mutex_);
  for (std::size_t u = 0; u < units_.size(); ++u) {
    // A unit whose backward never came (its output detached: an auxiliary head) may have had its
    // gather prefetched by the unit after it; drained above, that gather is done.
    if (units_[u].held == Held::Gathering) units_[u].held = Held::Gathered;
    free_full(u);  // the root, and any unit left gathered
  }
  link_piece_gradients();
  traffic_.steps += 1;
  traffic_.reduce_scatter_bytes += padded_bytes();
  traffic_.allreduce_bytes += bytes_of(loss_) + flag_bytes;
  traffic_.collectives += static_cast<std::int64_t>(units_.size()) + 1 + (flag_bytes > 0 ? 1 : 0);
  for (const auto& u : units_) {
    traffic_.reduce_scatter_seconds += u.reduce_scatter_seconds;
    traffic_.all_gather_seconds += u.all_gather_seconds;
  }
  return loss_.clone().reshape({});
}

std::vector<torch::Tensor> ShardedUnits::gather_full_parameters() {
  std::vector<torch::Tensor> full(parameters_.size());
  for (std::size_t u = 0; u < units_.size(); ++u) {
    const auto& unit = units_[u];
    auto flat = torch::empty({unit.numel}, unit.shard.options());
    comm_.post([this, &unit, &flat, u] {
      all_gather(group_, unit.shard, flat, "all-gather of parameter unit " + std::to_string(u) + " for the parity check");
    });
    comm_.drain();
    for (std::size_t s = 0; s < unit.params.size(); ++s) {
      const auto& p = parameters_[unit.params[s]];
      full[unit.params[s]] = flat.narrow(0, unit.offsets[s], p.numel()).view(p.sizes());
    }
  }
  return full;
}

}  // namespace ddpbench
