#pragma once
// Per-virtual-device accounting of CPU tensor memory. A wrapping CPU allocator counts every
// allocation against the virtual device of the thread that made it (DeviceScope), so a CPU run can
// show what a GPU run shows with the caching allocator: current and peak bytes per device.
#include <c10/core/Allocator.h>

#include <cstdint>
#include <optional>

namespace ddpbench {

class CpuMemoryCounter {
 public:
  static constexpr int kMaxDevices = 64;
  // Allocations under this scope belong to no device: host-side data such as the in-memory
  // datasets and the parity references, which a GPU run would not hold on a device either.
  static constexpr int kHost = kMaxDevices - 1;
  static constexpr int kMaxWorldSize = kMaxDevices - 1;

  // Installs the counting allocator as LibTorch's CPU allocator (idempotent). Tensors allocated
  // before are freed by their own allocator and never counted.
  static void install();
  static bool installed();

  // Allocations made on this thread while the scope lives count against `device`.
  class DeviceScope {
   public:
    explicit DeviceScope(int device);
    ~DeviceScope();
    DeviceScope(const DeviceScope&) = delete;
    DeviceScope& operator=(const DeviceScope&) = delete;

   private:
    int previous_;
  };
  static int current_device();

  // The virtual device an allocation of this allocator was charged to; nothing for memory it did
  // not allocate (shared memory, tensors from before install()).
  static std::optional<int> device_of(const c10::DataPtr& data);

  static std::int64_t current_bytes(int device);
  static std::int64_t peak_bytes(int device);
  // Peaks restart from the bytes currently held.
  static void reset_peaks();
};

}  // namespace ddpbench
