#pragma once
// Parameters that get no gradient (a layer forward never calls, an auxiliary head, a branch not
// taken), handled as PyTorch handles them: no gradient, so the optimizer skips them (no weight decay,
// no momentum step), where zero-filled buckets would have stepped them.
//
// UnusedParameterFlags is DDP's find_unused_parameters decided per run: the first step all-reduces
// one flag per parameter (did this rank's backward produce its gradient?), after the step's other
// collectives; later steps do it again only where some rank left some parameter out, which every
// rank agrees on because they read the same reduced flags. A model whose parameters are all used
// pays one small all-reduce, on its first step. A parameter that is used on the first step and
// unused later (data-dependent control flow) is then zero-filled, as before.
//
// ShardPieces cuts a rank's chunk of a flat buffer at its parameters' edges, so that the sharded
// strategies' optimizers step each parameter's part as a tensor of its own and can leave out the
// parts of a parameter no rank used (a flat chunk stepped whole would decay them, as FSDP1's flat
// parameters do; FSDP2 and ZeroRedundancyOptimizer keep parameters whole and skip them).
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddpbench {

class ProcessGroupContext;

class UnusedParameterFlags {
 public:
  // `count` parameters; the flags live on the device `like` is on.
  UnusedParameterFlags(std::size_t count, const torch::Tensor& like);
  // Whether this step all-reduces the flags (then every rank must call reduce(), in the same place).
  bool needed() const { return track_; }
  // All-reduces `ready` (ready[k]: this rank's backward produced parameter k's gradient); returns the
  // bytes it all-reduced.
  std::int64_t reduce(const std::vector<char>& ready, ProcessGroupContext& group);
  // No rank produced parameter k's gradient this step (false on a step that did not reduce the
  // flags: those come only after a first step where every rank used every parameter).
  bool unused(std::size_t k) const { return unused_[k] != 0; }

 private:
  bool track_ = true;
  bool first_ = true;
  torch::Tensor used_;
  std::vector<char> unused_;
};

class ShardPieces {
 public:
  // `shard`: this rank's chunk, elements [begin, begin + shard.numel()) of a flat buffer in which
  // parameter params[s] takes numels[s] elements from offsets[s]. The pieces are the chunk's overlaps
  // with each parameter (padding is no piece), as tensors of their own over the chunk's storage.
  ShardPieces(const torch::Tensor& shard, std::int64_t begin, const std::vector<std::size_t>& params,
              const std::vector<std::int64_t>& offsets, const std::vector<std::int64_t>& numels);
  const std::vector<torch::Tensor>& tensors() const { return pieces_; }
  // Each piece's .grad: its part of `grad_shard` (the chunk's reduced gradient), none where
  // skip(parameter) says so, and none at all where `grad_shard` is undefined.
  void link(const torch::Tensor& grad_shard, const std::function<bool(std::size_t)>& skip);

 private:
  std::vector<torch::Tensor> pieces_;
  std::vector<std::size_t> param_;           // the parameter each piece is part of
  std::vector<std::int64_t> start_, length_;  // within the chunk
};

}  // namespace ddpbench
