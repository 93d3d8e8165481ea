#include "devices/device_set.h"

#include <sched.h>

#include <algorithm>
#include <vector>

#include "base/errors.h"
#include "compat/torch_compat.h"

namespace ddpbench {

const char* to_string(DeviceKind kind) { return kind == DeviceKind::Cuda ? "cuda" : "cpu"; }

DeviceSet::DeviceSet(DeviceKind kind, int size, int threads_per_device)
    : kind_(kind), size_(size), threads_per_device_(threads_per_device) {}

c10::Device DeviceSet::device(int index) const {
  if (kind_ == DeviceKind::Cuda) return c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(index));
  return c10::Device(c10::kCPU);
}

int available_cpus() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return 1;
}

void pin_to_core_slice(int slot, int slots, int threads) {
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return;
  std::vector<int> cores;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &allowed)) cores.push_back(c);
  }
  if (static_cast<int>(cores.size()) < slots * threads) return;
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int i = 0; i < threads; ++i) CPU_SET(cores[static_cast<size_t>(slot * threads + i)], &mine);
  sched_setaffinity(0, sizeof(mine), &mine);
}

DeviceSet resolve_devices(const DeviceRequest& request) {
  DeviceKind kind;
  if (request.device == "cpu") {
    kind = DeviceKind::Cpu;
  } else if (request.device == "cuda") {
    if (!compat::cuda_available()) {
      throw UsageError(compat::built_with_cuda()
                           ? "--device cuda: no CUDA device is visible (check CUDA_VISIBLE_DEVICES and the driver)"
                           : "--device cuda: this ddpbench was built against a LibTorch without CUDA");
    }
    kind = DeviceKind::Cuda;
  } else if (request.device == "auto") {
    kind = compat::cuda_available() ? DeviceKind::Cuda : DeviceKind::Cpu;
  } else {
    throw UsageError("--device: unknown device '" + request.device + "' (expected auto, cpu or cuda)");
  }

  int size = request.world_size;
  if (kind == DeviceKind::Cuda) {
    const int visible = compat::cuda_device_count();
    if (size == 0) size = visible;
    if (size > visible) {
      throw UsageError("--world-size: " + std::to_string(size) + " exceeds the " + std::to_string(visible) +
                       " visible CUDA device(s)");
    }
  } else if (size == 0) {
    size = 2;  // enough to show every parallel strategy's cost on a laptop
  }

  int threads = request.threads;
  // Each device (CPU virtual device, or the host side of a GPU rank) gets its share of the cores.
  if (threads == 0) threads = std::max(1, available_cpus() / size);
  return DeviceSet(kind, size, threads);
}

}  // namespace ddpbench
