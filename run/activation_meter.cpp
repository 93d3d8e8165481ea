#include "run/activation_meter.h"

#include <algorithm>

namespace ddpbench {

void ActivationMeter::on_forward(bool opening) {
  if (opening && !baseline_.empty()) return;  // a later micro-batch's forward: the step's baseline stands
  const auto now = probe_.untracked_bytes(strategy_.held_tensors());
  if (opening) {
    baseline_ = now;
    return;
  }
  if (baseline_.empty()) return;  // a close without its open (none in practice)
  if (largest_.size() < now.size()) largest_.resize(now.size());
  for (std::size_t d = 0; d < now.size() && d < baseline_.size(); ++d) {
    if (!now[d] || !baseline_[d]) continue;
    const std::int64_t alive = std::max<std::int64_t>(0, *now[d] - *baseline_[d]);
    if (!largest_[d] || alive > *largest_[d]) largest_[d] = alive;
  }
}

void ActivationMeter::fill(std::vector<DeviceMemory>& memory) const {
  for (std::size_t d = 0; d < memory.size() && d < largest_.size(); ++d) memory[d].activation_bytes = largest_[d];
}

}  // namespace ddpbench
