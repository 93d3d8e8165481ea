#pragma once
// The devices a case runs on: N CUDA devices, or N CPU "virtual devices" that share the cores.
#include <c10/core/Device.h>

#include <string>

namespace ddpbench {

enum class DeviceKind { Cpu, Cuda };
const char* to_string(DeviceKind kind);

class DeviceSet {
 public:
  DeviceSet(DeviceKind kind, int size, int threads_per_device);

  DeviceKind kind() const { return kind_; }
  int size() const { return size_; }
  // Intra-op threads each device (replica, rank or worker) gets.
  int threads_per_device() const { return threads_per_device_; }
  // The torch device for virtual/physical device `index`; every CPU virtual device is torch's kCPU.
  c10::Device device(int index) const;
  bool is_cuda() const { return kind_ == DeviceKind::Cuda; }

 private:
  DeviceKind kind_;
  int size_;
  int threads_per_device_;
};

struct DeviceRequest {
  std::string device = "auto";  // auto | cpu | cuda
  int world_size = 0;           // 0: all visible GPUs, or 2 CPU virtual devices
  int threads = 0;              // 0: the cores divided among the devices
};

// Resolves the user's request against this machine. Throws UsageError naming the flag on
// `--device cuda` without CUDA or a world size above the visible GPUs.
DeviceSet resolve_devices(const DeviceRequest& request);

// Cores this process may run on (sched_getaffinity), at least 1.
int available_cpus();

// One of `slots` processes sharing this host's cores (local ranks, Hogwild workers) takes its own
// slice of `threads` of them, so that the processes do not migrate onto each other's cores. Does
// nothing when the cores are too few for every slot to get its slice (the OS places them then).
void pin_to_core_slice(int slot, int slots, int threads);

}  // namespace ddpbench
