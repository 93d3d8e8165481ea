#pragma once
// The arithmetic precision of a run (--dtype): fp32, or mixed precision as torch.autocast does it,
// with matrix products and convolutions in bf16 or fp16 while the weights, the optimizer and the
// loss stay fp32. Strategies run each forward pass (and the loss) inside an AutocastScope and step
// their optimizer through a LossScaler, which is a pass-through except under fp16.
#include <torch/optim/optimizer.h>
#include <torch/types.h>

#include <cstdint>
#include <string>

#include "compat/torch_compat.h"

namespace ddpbench {

enum class Precision { Fp32, Bf16, Fp16 };
const char* to_string(Precision precision);  // "fp32", "bf16", "fp16"
// Throws UsageError naming `flag` and the accepted values.
Precision parse_precision(const std::string& flag, const std::string& value);
// The type matrix products run in: Float, BFloat16 or Half.
c10::ScalarType compute_type(Precision precision);
// Why `precision` cannot run on `device_type`, or empty. LibTorch's CPU autocast runs bf16 only.
std::string precision_unsupported_reason(Precision precision, c10::DeviceType device_type);
// The bytes of an element of softmax's output in a forward at `precision` on `device_type` (what
// plain attention keeps of its scores: SequenceFacts). fp32: 4. Under autocast on CUDA also 4:
// softmax is on CUDA autocast's fp32 list (PyTorch's AMP op reference). On a CPU 2: CPU autocast
// runs softmax in its input's type, the bf16 product's (measured on LibTorch 1.13's gpt2: 2.0
// bytes a score element, from its activations at three sequence lengths).
std::int64_t softmax_element_bytes(Precision precision, c10::DeviceType device_type);
// The type the parity check trains a synchronous strategy and its single reference in. Under fp32
// it is float64: at a kink (ReLU), fp32 rounding that differs between batch splits (another BLAS
// kernel for 8 rows than for 24) can flip one activation, and one flipped sample moves a row of
// weights by about the learning rate times its gradient, 1e-4 and more of the parameters' scale,
// which no fp32 tolerance separates from a wrong gradient. In float64 the same flip needs a
// pre-activation 1e9 times closer to zero. Under bf16/fp16 the autocast path itself is what parity
// checks, on fp32 parameters: Float.
c10::ScalarType parity_dtype(Precision precision);
// The parity tolerance when --parity-tolerance is not given: for fp32 runs one that float64
// training meets, or one that a correct strategy meets when its products round to bf16/fp16 in
// another batch split than single's.
double default_parity_tolerance(Precision precision);

// Autocast to the run's precision on this thread, for one forward pass and its loss; nothing under
// fp32. Autocast is thread-local: every thread that runs a forward pass opens its own scope.
class AutocastScope {
 public:
  AutocastScope(Precision precision, const c10::Device& device);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  compat::AutocastState previous_;
};

// fp16's dynamic loss scaling, as torch.amp.GradScaler with its defaults. fp16 gradients below
// about 6e-8 flush to zero, so the loss is multiplied by the scale before backward; before the
// optimizer step the gradients are divided by it and checked: a step with an inf or NaN gradient is
// skipped and the scale halved, and after `growth_interval` clean steps in a row the scale doubles.
// bf16 has fp32's range and needs none of this: under fp32 and bf16 the scaler passes through.
class LossScaler {
 public:
  explicit LossScaler(Precision precision, double initial_scale = 65536.0, int growth_interval = 2000);

  bool enabled() const { return enabled_; }
  // What backward starts from: loss x scale (or the loss itself).
  torch::Tensor scale(const torch::Tensor& loss) const;
  // Unscales the gradients of `optimizer`'s parameters in place and steps it unless one of them is
  // not finite, then updates the scale. Returns whether the optimizer stepped.
  bool step(torch::optim::Optimizer& optimizer);

  double current_scale() const { return scale_; }
  std::int64_t skipped_steps() const { return skipped_; }

 private:
  bool enabled_;
  double scale_;
  int growth_interval_;
  int clean_steps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace ddpbench
