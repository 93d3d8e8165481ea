#include "collectives/bucket_plan.h"

#include <stdexcept>

namespace ddpbench {

std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<torch::Tensor>& parameters, BucketCaps caps) {
  if (parameters.empty()) throw std::invalid_argument("plan_buckets: no parameters");
  std::vector<std::vector<std::size_t>> layout;
  std::int64_t bytes_in_bucket = 0;
  for (std::size_t k = parameters.size(); k-- > 0;) {
    const auto& p = parameters[k];
    const std::int64_t bytes = p.numel() * static_cast<std::int64_t>(p.element_size());
    const bool same_kind = !layout.empty() && parameters[layout.back().front()].scalar_type() == p.scalar_type() &&
                           parameters[layout.back().front()].device() == p.device();
    // The first bucket closes at its own (smaller) cap; later ones at --bucket-mb.
    const double cap_mb = layout.size() == 1 ? caps.first_cap_mb : caps.cap_mb;
    const auto current_cap = static_cast<std::int64_t>(cap_mb * (1 << 20));
    if (layout.empty() || !same_kind || (bytes_in_bucket > 0 && bytes_in_bucket + bytes > current_cap)) {
      layout.emplace_back();
      bytes_in_bucket = 0;
    }
    layout.back().push_back(k);
    bytes_in_bucket += bytes;
  }
  return layout;
}

}  // namespace ddpbench
