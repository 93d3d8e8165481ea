// The datasheet peaks that achieved TFLOP/s is read against, by the names CUDA gives the devices.
#include <gtest/gtest.h>

#include "devices/peak_flops.h"

namespace ddpbench {
namespace {

TEST(PeakFlops, KnowsTheDataCentreGpusByTheirCudaNames) {
  struct Row {
    const char* name;
    Precision precision;
    double tflops;
    const char* model;
  };
  for (const Row& row : {Row{"NVIDIA H100 80GB HBM3", Precision::Bf16, 989.4, "H100 SXM"},
                         Row{"NVIDIA H100 80GB HBM3", Precision::Fp32, 67.0, "H100 SXM"},
                         Row{"NVIDIA H100 PCIe", Precision::Fp16, 756.5, "H100 PCIe"},
                         Row{"NVIDIA H100 NVL", Precision::Bf16, 835.5, "H100 NVL"},
                         Row{"NVIDIA H200", Precision::Bf16, 989.4, "H200 SXM"},
                         Row{"NVIDIA H200 NVL", Precision::Fp32, 60.0, "H200 NVL"},
                         Row{"NVIDIA A100-SXM4-80GB", Precision::Bf16, 312.0, "A100"}}) {
    SCOPED_TRACE(row.name);
    const auto peak = datasheet_peak_flops(row.name, row.precision);
    ASSERT_TRUE(peak.has_value());
    EXPECT_DOUBLE_EQ(peak->flops_per_second, row.tflops * 1e12);
    EXPECT_NE(peak->source.find(row.model), std::string::npos) << peak->source;
    EXPECT_NE(peak->source.find(to_string(row.precision)), std::string::npos) << peak->source;
  }
}

TEST(PeakFlops, HasNoFigureForDevicesItDoesNotKnow) {
  EXPECT_FALSE(datasheet_peak_flops("NVIDIA GeForce RTX 4090", Precision::Bf16).has_value());
  EXPECT_FALSE(datasheet_peak_flops("", Precision::Fp32).has_value());
  EXPECT_FALSE(datasheet_peak_flops("Intel(R) Xeon(R) CPU", Precision::Bf16).has_value());
}

}  // namespace
}  // namespace ddpbench
