#include "collectives/unused_parameters.h"

#include <algorithm>

#include "distributed/process_group.h"

namespace ddpbench {

UnusedParameterFlags::UnusedParameterFlags(std::size_t count, const torch::Tensor& like)
    : used_(torch::zeros({static_cast<std::int64_t>(count)}, like.options().dtype(torch::kFloat).requires_grad(false))),
      unused_(count, 0) {}

std::int64_t UnusedParameterFlags::reduce(const std::vector<char>& ready, ProcessGroupContext& group) {
  torch::NoGradGuard no_grad;
  std::vector<float> flags(ready.begin(), ready.end());
  used_.copy_(torch::tensor(flags, torch::kFloat));
  group.allreduce(used_, "all-reduce of the used-parameter flags");
  const auto counts = used_.to(torch::kCPU);
  const float* count = counts.data_ptr<float>();
  bool all_used_everywhere = true;
  for (std::size_t k = 0; k < unused_.size(); ++k) {
    unused_[k] = count[k] < 0.5f;
    all_used_everywhere = all_used_everywhere && count[k] > static_cast<float>(group.size()) - 0.5f;
  }
  if (first_) track_ = !all_used_everywhere;  // the same reduced flags on every rank: one decision
  first_ = false;
  return used_.numel() * static_cast<std::int64_t>(used_.element_size());
}

ShardPieces::ShardPieces(const torch::Tensor& shard, std::int64_t begin, const std::vector<std::size_t>& params,
                         const std::vector<std::int64_t>& offsets, const std::vector<std::int64_t>& numels) {
  const std::int64_t end = begin + shard.numel();
  for (std::size_t s = 0; s < params.size(); ++s) {
    const std::int64_t from = std::max(begin, offsets[s]), to = std::min(end, offsets[s] + numels[s]);
    if (from >= to) continue;
    // detach(): a tensor of its own over the chunk's storage, not an autograd view, so .grad can be set.
    pieces_.push_back(shard.narrow(0, from - begin, to - from).detach());
    param_.push_back(params[s]);
    start_.push_back(from - begin);
    length_.push_back(to - from);
  }
}

void ShardPieces::link(const torch::Tensor& grad_shard, const std::function<bool(std::size_t)>& skip) {
  for (std::size_t i = 0; i < pieces_.size(); ++i) {
    pieces_[i].mutable_grad() =
        !grad_shard.defined() || skip(param_[i]) ? torch::Tensor() : grad_shard.narrow(0, start_[i], length_[i]).detach();
  }
}

}  // namespace ddpbench
