#include "devices/precision.h"

#include "base/errors.h"

namespace ddpbench {

const char* to_string(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp16: return "fp16";
  }
  return "?";
}

Precision parse_precision(const std::string& flag, const std::string& value) {
  for (Precision p : {Precision::Fp32, Precision::Bf16, Precision::Fp16}) {
    if (value == to_string(p)) return p;
  }
  throw UsageError(flag + ": unknown dtype '" + value + "' (expected fp32, bf16 or fp16)");
}

std::int64_t softmax_element_bytes(Precision precision, c10::DeviceType device_type) {
  if (precision == Precision::Fp32 || device_type == c10::DeviceType::CUDA) return 4;
  return 2;
}

c10::ScalarType compute_type(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return c10::ScalarType::Float;
    case Precision::Bf16: return c10::ScalarType::BFloat16;
    case Precision::Fp16: return c10::ScalarType::Half;
  }
  return c10::ScalarType::Float;
}

std::string precision_unsupported_reason(Precision precision, c10::DeviceType device_type) {
  if (precision == Precision::Fp16 && device_type == c10::DeviceType::CPU) {
    return "fp16 autocast needs CUDA: LibTorch's CPU autocast runs bf16 only (use --dtype bf16 on the CPU)";
  }
  return {};
}

c10::ScalarType parity_dtype(Precision precision) {
  return precision == Precision::Fp32 ? c10::ScalarType::Double : c10::ScalarType::Float;
}

double default_parity_tolerance(Precision precision) {
  // fp32 runs check parity in float64 (parity_dtype): measured at most 2.2e-16 on every workload,
  // strategy and world size 2 and 3 (docs/precision.md); 1e-9 leaves a margin of millions, while a
  // wrong or missing gradient moves parameters by 1e-4 of their scale and more.
  // A correct strategy's products round to bf16 (8 significant bits, 2^-8 = 3.9e-3 relative) at
  // another batch split than single's. Measured on every workload at world sizes 2 and 3 after 3
  // steps (docs/precision.md): at most 1.9e-3 with 4 samples per device, 1.8e-4 at the default
  // batches.
  // fp16 keeps 11 bits (2^-11 = 4.9e-4): the same margin, 8 times smaller (not yet measured on a GPU).
  switch (precision) {
    case Precision::Fp32: return 1e-9;
    case Precision::Bf16: return 1e-2;
    case Precision::Fp16: return 1e-3;
  }
  return 1e-9;
}

AutocastScope::AutocastScope(Precision precision, const c10::Device& device) {
  if (precision == Precision::Fp32) return;
  active_ = true;
  device_type_ = device.type();
  previous_ = compat::autocast_enter(device_type_, compute_type(precision));
}

AutocastScope::~AutocastScope() {
  if (active_) compat::autocast_exit(device_type_, previous_);
}

LossScaler::LossScaler(Precision precision, double initial_scale, int growth_interval)
    : enabled_(precision == Precision::Fp16), scale_(initial_scale), growth_interval_(growth_interval) {}

torch::Tensor LossScaler::scale(const torch::Tensor& loss) const { return enabled_ ? loss * scale_ : loss; }

bool LossScaler::step(torch::optim::Optimizer& optimizer) {
  if (!enabled_) {
    optimizer.step();
    return true;
  }
  torch::NoGradGuard no_grad;
  const double inverse = 1.0 / scale_;
  torch::Tensor non_finite;  // one flag per device would do; every strategy's master is on one
  for (auto& group : optimizer.param_groups()) {
    for (auto& p : group.params()) {
      auto& grad = p.mutable_grad();
      if (!grad.defined()) continue;
      grad.mul_(inverse);
      auto bad = grad.isfinite().logical_not().any();
      non_finite = non_finite.defined() ? non_finite.logical_or(bad.to(non_finite.device())) : bad;
    }
  }
  const bool found_inf = non_finite.defined() && non_finite.item<bool>();  // the one host sync, as GradScaler's
  if (found_inf) {
    ++skipped_;
    scale_ *= 0.5;
    clean_steps_ = 0;
    return false;
  }
  optimizer.step();
  if (++clean_steps_ == growth_interval_) {
    scale_ *= 2.0;
    clean_steps_ = 0;
  }
  return true;
}

}  // namespace ddpbench
