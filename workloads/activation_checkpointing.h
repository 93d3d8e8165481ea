#pragma once
// Activation checkpointing (--activation-checkpointing), per wrap unit: a checkpointed unit keeps only
// its input through the step and runs its forward again in backward to rebuild what its backward
// needs. LibTorch's C++ API has no torch.utils.checkpoint, so this is a custom autograd function:
// forward runs the unit under no-grad; backward runs it again with grad on the saved input, the RNG
// state of forward restored (dropout draws the same mask), and backpropagates through that second
// run, the parameters' gradients accumulating as any other's do (torch.utils.checkpoint's reentrant
// variant). A strategy's hooks around the unit (fsdp's gathers, tp's collectives) run again inside
// the recomputation exactly as in forward.
#include <torch/types.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace ddpbench {

// Which units are checkpointed: none, every one (full), or every N-th (every:N, units N-1, 2N-1, ...,
// counted from the first as torchtitan's selective layer checkpointing counts).
struct CheckpointPolicy {
  enum class Kind { None, Full, Every };
  Kind kind = Kind::None;
  int every = 1;  // Every: N >= 1

  bool enabled() const { return kind != Kind::None; }
  bool checkpoints(std::size_t unit) const;
  std::string to_string() const;  // "none", "full", "every:2"
  // Throws std::invalid_argument saying what is wrong with `text` (the caller names the flag).
  static CheckpointPolicy parse(const std::string& text);
};

// Opened around each recomputation, what the harness times as the `recompute` phase; the token it
// returns is dropped when the recomputation ends. Null: untimed.
using RecomputeScope = std::function<std::shared_ptr<void>()>;

// What a model runs its checkpointed units with (WorkloadModel::set_activation_checkpointing).
struct ActivationCheckpointing {
  CheckpointPolicy policy;
  RecomputeScope recompute_scope;
};

// body(input) with only `input` kept for backward (see the top of this file). `body` must compute the
// same function each time it is called, from `input` and the parameters alone.
torch::Tensor run_checkpointed(const torch::Tensor& input, std::function<torch::Tensor(const torch::Tensor&)> body,
                               const RecomputeScope& recompute_scope);

}  // namespace ddpbench
