#pragma once
// A device's peak arithmetic rate, to read achieved TFLOP/s against: NVIDIA's datasheet figures
// for the data-centre GPUs ddpbench is run on, or the user's own (--peak-tflops).
#include <optional>
#include <string>

#include "devices/precision.h"

namespace ddpbench {

struct PeakFlops {
  double flops_per_second = 0;  // one device
  std::string source;           // where the figure comes from, for the JSON
};

// The dense (no 2:4 sparsity) peak of one GPU named `device_name` (as cudaGetDeviceProperties gives
// it) for matrix products at `precision`; none for a device not in the table, CPUs included. fp32 is
// the CUDA cores' rate: LibTorch leaves TF32 off for matrix products by default (cuDNN convolutions
// use TF32 unless told not to, so convnet under fp32 can exceed it).
std::optional<PeakFlops> datasheet_peak_flops(const std::string& device_name, Precision precision);

}  // namespace ddpbench
