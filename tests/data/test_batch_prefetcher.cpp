// data/batch_prefetcher: batches placed on their device a step ahead, and the --data-path names.
#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include "data/batch_prefetcher.h"
#include "devices/counting_allocator.h"
#include "base/errors.h"

namespace ddpbench {
namespace {

Dataset numbered(std::int64_t size) {
  return {torch::arange(size * 3, torch::kFloat32).reshape({size, 3}), torch::arange(size, torch::kInt64)};
}

TEST(BatchPrefetcher, HandsOutTheLoadersBatchesInOrderAsCopiesOnTheDevice) {
  CpuMemoryCounter::install();
  const Dataset data = numbered(12);
  BatchLoader reference(data, EpochSampler(12, 4, 7, {}), {});
  BatchLoader source(data, EpochSampler(12, 4, 7, {}), {});
  BatchPrefetcher prefetcher(source, torch::kCPU, /*cpu_device_index=*/5);
  const std::int64_t device_before = CpuMemoryCounter::current_bytes(5);
  for (int step = 0; step < 7; ++step) {  // past an epoch: the next epoch's shuffle too
    SCOPED_TRACE(step);
    const Batch expected = reference.next();
    const Batch got = prefetcher.next();
    EXPECT_EQ(got.step, expected.step);
    EXPECT_EQ(got.epoch, expected.epoch);
    EXPECT_TRUE(torch::equal(got.inputs, expected.inputs));
    EXPECT_TRUE(torch::equal(got.targets, expected.targets));
    // A copy of its own, charged to the device: this batch and the next one, already copied.
    EXPECT_NE(got.inputs.data_ptr(), expected.inputs.data_ptr());
    const std::int64_t batch_bytes = (4 * 3 * 4) + (4 * 8);
    EXPECT_EQ(CpuMemoryCounter::current_bytes(5) - device_before, 2 * batch_bytes);
  }
}

TEST(BatchPrefetcher, DataPathsHaveTheirFlagsNames) {
  for (auto path : {DataPath::Auto, DataPath::Host, DataPath::Prefetch, DataPath::Device}) {
    EXPECT_EQ(parse_data_path("--data-path", to_string(path)), path);
  }
  try {
    parse_data_path("--data-path", "disk");
    FAIL() << "no UsageError";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--data-path: unknown data path 'disk'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace ddpbench
