#pragma once
// Activations as a kind of memory: what a step's forward leaves alive for its backward. Read at the
// edges of the forward phase (PhaseRecorder::set_observer): the bytes allocated on each device at
// the end of a forward pass, less those at the start of the step's first, neither counting what the
// strategy holds by kind at that moment (parameters, fsdp's gathered ones included; gradients;
// optimizer state). What is left is forward's saved tensors and its output, the loss included; the
// batch itself was on the device before forward began. Under pp, whose micro-batches' forwards
// and backwards interleave, it is the most that was alive at the end of any forward of the step.
#include <cstdint>
#include <optional>
#include <vector>

#include "devices/memory_probe.h"
#include "strategies/strategy.h"

namespace ddpbench {

class ActivationMeter {
 public:
  ActivationMeter(const MemoryProbe& probe, Strategy& strategy) : probe_(probe), strategy_(strategy) {}
  // The next forward to open is the step's first.
  void begin_step() { baseline_.clear(); }
  // The observer of Phase::Forward.
  void on_forward(bool opening);
  // Each device's largest figure since construction into `memory` (activation_bytes); none where
  // no forward was seen or a device's figures could not be told.
  void fill(std::vector<DeviceMemory>& memory) const;

 private:
  const MemoryProbe& probe_;
  Strategy& strategy_;
  std::vector<std::optional<std::int64_t>> baseline_;  // empty: the step's first forward is still to open
  std::vector<std::optional<std::int64_t>> largest_;
};

}  // namespace ddpbench
