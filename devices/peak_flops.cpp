#include "devices/peak_flops.h"

namespace ddpbench {
namespace {

struct GpuPeak {
  const char* model;  // as the source names it
  double fp32_tflops;
  double tensor_16bit_tflops;  // bf16 and fp16 alike, dense
};

// NVIDIA's product datasheets (H100: "NVIDIA H100 Tensor Core GPU" datasheet; H200: "NVIDIA H200
// Tensor Core GPU"; A100: "NVIDIA A100 Tensor Core GPU"), the dense figures (half the sparse ones).
constexpr GpuPeak kH100Sxm{"H100 SXM", 67.0, 989.4};
constexpr GpuPeak kH100Pcie{"H100 PCIe", 51.2, 756.5};
constexpr GpuPeak kH100Nvl{"H100 NVL", 60.0, 835.5};
constexpr GpuPeak kH200Sxm{"H200 SXM", 67.0, 989.4};
constexpr GpuPeak kH200Nvl{"H200 NVL", 60.0, 835.5};
constexpr GpuPeak kA100{"A100", 19.5, 312.0};

bool contains(const std::string& text, const char* part) { return text.find(part) != std::string::npos; }

const GpuPeak* find_gpu(const std::string& name) {
  if (contains(name, "H200")) return contains(name, "NVL") ? &kH200Nvl : &kH200Sxm;
  if (contains(name, "H100")) {
    if (contains(name, "NVL")) return &kH100Nvl;
    if (contains(name, "PCIe") || contains(name, "PCIE")) return &kH100Pcie;
    return &kH100Sxm;  // "NVIDIA H100 80GB HBM3"
  }
  if (contains(name, "A100")) return &kA100;
  return nullptr;
}

}  // namespace

std::optional<PeakFlops> datasheet_peak_flops(const std::string& device_name, Precision precision) {
  const GpuPeak* gpu = find_gpu(device_name);
  if (gpu == nullptr) return std::nullopt;
  const bool tensor = precision != Precision::Fp32;
  const double tflops = tensor ? gpu->tensor_16bit_tflops : gpu->fp32_tflops;
  return PeakFlops{tflops * 1e12, std::string("NVIDIA datasheet, ") + gpu->model + ", dense " +
                                      (tensor ? std::string(to_string(precision)) + " tensor core" : "fp32")};
}

}  // namespace ddpbench
