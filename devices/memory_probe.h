#pragma once
// Peak memory per device for one measured window: the CUDA caching allocator's peaks on GPUs, the
// counting CPU allocator's per-virtual-device peaks on CPU, and the process's peak RSS.
#include <torch/types.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "devices/device_set.h"

namespace ddpbench {

struct DeviceMemory {
  int device = 0;
  DeviceKind kind = DeviceKind::Cpu;
  std::optional<std::int64_t> peak_allocated_bytes;
  std::optional<std::int64_t> peak_reserved_bytes;  // CUDA only: the caching allocator's reservation
  // Bytes already held on the device when the repetition began, before its strategy was built:
  // what earlier cases left there. Part of every peak above; 0 when cases are measured like with like.
  std::optional<std::int64_t> held_before_bytes;
  // What the strategy held on the device at the end of the window, between steps, by kind: part of
  // the peak; the rest of the peak is activations, communication buffers and temporaries. Nothing
  // where it cannot be told (an optimizer whose state this build cannot read).
  std::optional<std::int64_t> parameter_bytes;
  std::optional<std::int64_t> gradient_bytes;
  std::optional<std::int64_t> optimizer_state_bytes;
  // What forward left alive for backward, at its largest over the window: bytes allocated at the end
  // of a forward pass less those at its start, neither counting what the strategy held by the kinds
  // above at that moment (run/activation_meter.h). Nothing where no forward ran on the step's thread
  // (hogwild's workers) or the kinds cannot be told.
  std::optional<std::int64_t> activation_bytes;
};

// The tensors a strategy holds between steps, by kind.
struct HeldTensors {
  std::vector<torch::Tensor> parameters;
  std::vector<torch::Tensor> gradients;
  std::vector<torch::Tensor> optimizer_state;
  bool optimizer_state_known = true;
  bool held_by_other_processes = false;  // hogwild's worker processes: nothing here to count
};

class MemoryProbe {
 public:
  // Devices [first_cuda_device, first_cuda_device + devices_used) on CUDA (a rank probes its own);
  // on CPU the virtual devices 0.. of this process.
  MemoryProbe(const DeviceSet& devices, int devices_used, int first_cuda_device = 0);
  // Before a repetition's strategy exists: gives back what this process keeps on its devices for no
  // tensor (cuBLAS workspaces of earlier cases' streams, the caching allocator's free blocks), so
  // one case's leftovers do not count in the next one's peak, and notes what is still held.
  void begin_case();
  // Starts a window: peaks restart from what is held now.
  void reset();
  std::vector<DeviceMemory> read() const;
  // Bytes allocated on each device now, less what `held` holds there by kind (add_held_bytes); none
  // for a device where either cannot be told.
  std::vector<std::optional<std::int64_t>> untracked_bytes(const HeldTensors& held) const;
  // Fills each entry's bytes by kind from `held`: each storage counted once, under the first kind
  // that names it (parameters, then gradients, then optimizer state), on the device it lives on (on
  // CPU, the virtual device its allocation was charged to). Tensors on no probed device are not
  // counted.
  void add_held_bytes(std::vector<DeviceMemory>& memory, const HeldTensors& held) const;
  // Peak resident set of this process since the last reset (VmHWM), if the kernel reports it.
  static std::optional<std::int64_t> process_peak_rss_bytes();
  // This process's mapped address space (VmSize) against its address-space limit (ulimit -v,
  // RLIMIT_AS): none when there is no limit or the kernel does not say.
  struct AddressSpace {
    std::int64_t mapped_bytes = 0;
    std::int64_t limit_bytes = 0;
  };
  static std::optional<AddressSpace> address_space();

 private:
  const DeviceSet& devices_;
  int devices_used_;
  int first_cuda_device_;
  std::vector<std::optional<std::int64_t>> held_before_;
};

// peak(device 0) / mean(peak of the others); none with fewer than two devices or no figures.
std::optional<double> memory_imbalance(const std::vector<DeviceMemory>& memory);

}  // namespace ddpbench
