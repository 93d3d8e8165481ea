#include "devices/device_transfer.h"

#include "devices/counting_allocator.h"

namespace ddpbench {

std::vector<std::int64_t> even_split(std::int64_t total, int count) {
  std::vector<std::int64_t> sizes(static_cast<size_t>(count), total / count);
  for (std::int64_t i = 0; i < total % count; ++i) ++sizes[static_cast<size_t>(i)];
  return sizes;
}

torch::Tensor copy_to_device(const torch::Tensor& tensor, const DeviceSet& devices, int index) {
  if (devices.is_cuda()) return tensor.to(devices.device(index), /*non_blocking=*/true, /*copy=*/true);
  CpuMemoryCounter::DeviceScope charge_to(index);
  return tensor.clone();
}

std::vector<torch::Tensor> scatter(const torch::Tensor& tensor, const DeviceSet& devices, int count) {
  const std::int64_t total = tensor.size(0);
  if (total < count) {
    throw std::invalid_argument("scatter: a batch of " + std::to_string(total) + " cannot feed " +
                                std::to_string(count) + " devices");
  }
  const auto chunks = tensor.split_with_sizes(even_split(total, count), 0);
  std::vector<torch::Tensor> out;
  out.reserve(chunks.size());
  for (int i = 0; i < count; ++i) out.push_back(copy_to_device(chunks[static_cast<size_t>(i)], devices, i));
  return out;
}

torch::Tensor gather(const std::vector<torch::Tensor>& parts, const DeviceSet& devices, int target) {
  if (!devices.is_cuda()) {
    // The concatenation is the copy into the target's memory.
    CpuMemoryCounter::DeviceScope charge_to(target);
    return torch::cat(parts, 0);
  }
  std::vector<torch::Tensor> moved;
  moved.reserve(parts.size());
  for (const auto& p : parts) moved.push_back(p.to(devices.device(target), /*non_blocking=*/true));
  return torch::cat(moved, 0);
}

}  // namespace ddpbench
