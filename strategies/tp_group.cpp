#include "strategies/tp_group.h"

#include <torch/csrc/autograd/custom_function.h>

#include <chrono>
#include <optional>
#include <string>

#include "collectives/shard_collectives.h"
#include "compat/torch_compat.h"
#include "distributed/process_group.h"

namespace ddpbench {

int TensorParallelGroup::rank() const { return group_->rank(); }
int TensorParallelGroup::size() const { return group_->size(); }

// bf16 where the backend cannot send it (1.x's Gloo) goes as float32.
c10::ScalarType TensorParallelGroup::sendable(c10::ScalarType type) const {
  return type == torch::kBFloat16 && group_->kind() == DeviceKind::Cpu && !compat::gloo_sends_bf16() ? torch::kFloat
                                                                                                   : type;
}

torch::Tensor TensorParallelGroup::all_reduced(const torch::Tensor& x, const char* what) {
  const bool widen = sendable(x.scalar_type()) != x.scalar_type();
  auto sum = widen ? x.detach().to(torch::kFloat) : x.detach().contiguous().clone();
  reduce_in_place(sum, VocabReduce::Sum, what);
  return widen ? sum.to(x.scalar_type()) : sum;
}

void TensorParallelGroup::reduce_in_place(torch::Tensor& values, VocabReduce op, const char* what) {
  std::optional<PhaseRecorder::Scope> scope;
  if (phases_ != nullptr) scope.emplace(*phases_, Phase::CommExposed, what);
  const auto start = std::chrono::steady_clock::now();
  if (op == VocabReduce::Max) {
    group_->allreduce_max(values, std::string("tp: ") + what);
  } else {
    group_->allreduce(values, std::string("tp: ") + what);
  }
  seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  bytes_ += values.numel() * static_cast<std::int64_t>(values.element_size());
  ++collectives_;
}

torch::Tensor TensorParallelGroup::all_gathered(const torch::Tensor& share, std::int64_t dim, const char* what) {
  const auto type = share.scalar_type();
  const auto moved = share.detach().movedim(dim, 0);  // the shares end to end
  const auto input = moved.to(sendable(type)).contiguous().view(-1);
  auto output = torch::empty({input.numel() * group_->size()}, input.options());
  std::optional<PhaseRecorder::Scope> scope;
  if (phases_ != nullptr) scope.emplace(*phases_, Phase::CommExposed, what);
  const auto done = all_gather(*group_, input, output, std::string("tp: ") + what);
  gathered_.add(output, done.seconds);
  auto shape = moved.sizes().vec();
  shape[0] *= group_->size();
  return output.view(shape).movedim(0, dim).to(type);
}

torch::Tensor TensorParallelGroup::reduce_scattered(const torch::Tensor& whole, std::int64_t dim, const char* what) {
  const auto type = whole.scalar_type();
  const auto moved = whole.detach().movedim(dim, 0);
  // The ring works in its input: a copy of its own, whatever the caller still reads.
  auto input = torch::empty(moved.sizes(), moved.options().dtype(sendable(type)));
  input.copy_(moved);
  input = input.view(-1);
  auto output = torch::empty({input.numel() / group_->size()}, input.options());
  std::optional<PhaseRecorder::Scope> scope;
  if (phases_ != nullptr) scope.emplace(*phases_, Phase::CommExposed, what);
  const auto done = reduce_scatter(*group_, input, output, std::string("tp: ") + what);
  scattered_.add(input, done.seconds);
  auto shape = moved.sizes().vec();
  shape[0] /= group_->size();
  return output.view(shape).movedim(0, dim).to(type);
}

void TensorParallelGroup::Kind::add(const torch::Tensor& whole, double s) {
  bytes += whole.numel() * static_cast<std::int64_t>(whole.element_size());
  seconds += s;
  ++collectives;
}

namespace {

// Megatron's f: the input of a column layer, whole on every rank; its gradient is each rank's part
// of the sum, all-reduced.
struct CopyToTensorParallel : torch::autograd::Function<CopyToTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, TensorParallelGroup* tp) {
    ctx->saved_data["tp"] = reinterpret_cast<std::int64_t>(tp);
    return x.view_as(x);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* tp = reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["tp"].toInt());
    return {tp->all_reduced(grads[0], "all-reduce backward"), torch::Tensor()};
  }
};

// Megatron's g: a row layer's partial sums, all-reduced into the whole output; its gradient is the
// same on every rank and passes through.
struct ReduceFromTensorParallel : torch::autograd::Function<ReduceFromTensorParallel> {
  static torch::Tensor forward(torch::autograd::AutogradContext*, const torch::Tensor& x, TensorParallelGroup* tp) {
    return tp->all_reduced(x, "all-reduce forward");
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext*,
                                                 torch::autograd::variable_list grads) {
    return {grads[0], torch::Tensor()};
  }
};

// The hidden state entering the blocks: this rank's share of the sequence; its gradient is every
// rank's share's, all-gathered.
struct KeepSequenceShare : torch::autograd::Function<KeepSequenceShare> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t dim,
                               TensorParallelGroup* tp) {
    ctx->saved_data["tp"] = reinterpret_cast<std::int64_t>(tp);
    ctx->saved_data["dim"] = dim;
    const std::int64_t share = x.size(dim) / tp->size();
    return x.narrow(dim, tp->rank() * share, share).contiguous();
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* tp = reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["tp"].toInt());
    return {tp->all_gathered(grads[0], ctx->saved_data["dim"].toInt(), "all-gather backward"), torch::Tensor(),
            torch::Tensor()};
  }
};

// A column layer's input (or the output layer's): every token, all-gathered; its gradient is each
// rank's part of the sum, reduce-scattered back into the shares.
struct GatherSequenceShares : torch::autograd::Function<GatherSequenceShares> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t dim,
                               TensorParallelGroup* tp) {
    ctx->saved_data["tp"] = reinterpret_cast<std::int64_t>(tp);
    ctx->saved_data["dim"] = dim;
    return tp->all_gathered(x, dim, "all-gather forward");
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* tp = reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["tp"].toInt());
    return {tp->reduce_scattered(grads[0], ctx->saved_data["dim"].toInt(), "reduce-scatter backward"),
            torch::Tensor(), torch::Tensor()};
  }
};

// A row layer's partial sums: summed, each rank keeping its share of the sequence; the gradient of
// the share, all-gathered.
struct ReduceScatterToSequenceShare : torch::autograd::Function<ReduceScatterToSequenceShare> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, std::int64_t dim,
                               TensorParallelGroup* tp) {
    ctx->saved_data["tp"] = reinterpret_cast<std::int64_t>(tp);
    ctx->saved_data["dim"] = dim;
    return tp->reduce_scattered(x, dim, "reduce-scatter forward");
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* tp = reinterpret_cast<TensorParallelGroup*>(ctx->saved_data["tp"].toInt());
    return {tp->all_gathered(grads[0], ctx->saved_data["dim"].toInt(), "all-gather backward"), torch::Tensor(),
            torch::Tensor()};
  }
};

}  // namespace

torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& tp) {
  return CopyToTensorParallel::apply(x, &tp);
}
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& tp) {
  return ReduceFromTensorParallel::apply(x, &tp);
}
torch::Tensor keep_sequence_share(const torch::Tensor& x, std::int64_t dim, TensorParallelGroup& tp) {
  return KeepSequenceShare::apply(x, dim, &tp);
}
torch::Tensor gather_sequence_shares(const torch::Tensor& x, std::int64_t dim, TensorParallelGroup& tp) {
  return GatherSequenceShares::apply(x, dim, &tp);
}
torch::Tensor reduce_scatter_to_sequence_share(const torch::Tensor& x, std::int64_t dim, TensorParallelGroup& tp) {
  return ReduceScatterToSequenceShare::apply(x, dim, &tp);
}

}  // namespace ddpbench
