#include <gtest/gtest.h>
#include <torch/types.h>
#include <torch/utils.h>

#include <thread>

#include "devices/counting_allocator.h"
#include "devices/memory_probe.h"

namespace ddpbench {
namespace {

TEST(CpuMemoryCounter, AttributesAnAllocationToTheThreadsDevice) {
  CpuMemoryCounter::install();
  constexpr std::int64_t kBytes = 64 << 20;
  const std::int64_t before1 = CpuMemoryCounter::current_bytes(1);
  const std::int64_t before2 = CpuMemoryCounter::current_bytes(2);
  CpuMemoryCounter::reset_peaks();
  std::thread worker([&] {
    CpuMemoryCounter::DeviceScope scope(2);
    auto t = torch::empty({kBytes / 4}, torch::kFloat32);
    EXPECT_EQ(CpuMemoryCounter::current_bytes(2) - before2, kBytes);
  });
  worker.join();
  // Freed when the thread's tensor died; the peak remembers it; device 1 saw nothing.
  EXPECT_EQ(CpuMemoryCounter::current_bytes(2), before2);
  EXPECT_GE(CpuMemoryCounter::peak_bytes(2) - before2, kBytes);
  EXPECT_EQ(CpuMemoryCounter::current_bytes(1), before1);
  EXPECT_LT(CpuMemoryCounter::peak_bytes(1) - before1, kBytes);
}

// A freed block above glibc's mmap threshold (32 MiB) is kept for the next allocation of its size,
// as a GPU's caching allocator keeps its blocks, instead of going back to the kernel to be faulted
// in again: the same size gets the same block, counted again as allocated on the device that now
// takes it; the counter says nothing of the cached bytes.
TEST(CpuMemoryCounter, AFreedLargeBlockServesTheNextAllocationOfItsSize) {
  CpuMemoryCounter::install();
  constexpr std::int64_t kBytes = 48 << 20;
  const std::int64_t before = CpuMemoryCounter::current_bytes(3);
  CpuMemoryCounter::DeviceScope scope(3);
  const void* first = nullptr;
  {
    auto t = torch::empty({kBytes / 4}, torch::kFloat32);
    first = t.data_ptr();
    t.fill_(7.0f);
    EXPECT_EQ(CpuMemoryCounter::current_bytes(3) - before, kBytes);
  }
  EXPECT_EQ(CpuMemoryCounter::current_bytes(3), before) << "a cached block is no longer the device's";
  auto again = torch::empty({kBytes / 4}, torch::kFloat32);
  EXPECT_EQ(again.data_ptr(), first);
  // The very block, not fresh pages the kernel happened to map at the same address (those are zero).
  EXPECT_EQ(again[0].item<float>(), 7.0f);
  EXPECT_EQ(again[kBytes / 4 - 1].item<float>(), 7.0f);
  EXPECT_EQ(CpuMemoryCounter::current_bytes(3) - before, kBytes);
  // Another size does not take it.
  auto other = torch::empty({kBytes / 4 + 1024}, torch::kFloat32);
  EXPECT_NE(other.data_ptr(), first);
}

TEST(CpuMemoryCounter, FreeOnAnotherThreadCreditsTheAllocatingDevice) {
  CpuMemoryCounter::install();
  const std::int64_t before = CpuMemoryCounter::current_bytes(3);
  torch::Tensor t;
  {
    CpuMemoryCounter::DeviceScope scope(3);
    t = torch::ones({1 << 20}, torch::kFloat32);
  }
  std::thread([moved = std::move(t)]() mutable { moved.reset(); }).join();
  EXPECT_EQ(CpuMemoryCounter::current_bytes(3), before);
}

TEST(MemoryProbe, BeginCaseNotesWhatEachDeviceAlreadyHoldsAndThePeakIncludesIt) {
  CpuMemoryCounter::install();
  const DeviceSet devices(DeviceKind::Cpu, 2, 1);
  MemoryProbe probe(devices, 2);
  constexpr std::int64_t kLeftover = 4 << 20, kCase = 8 << 20;
  const std::int64_t before0 = CpuMemoryCounter::current_bytes(0), before1 = CpuMemoryCounter::current_bytes(1);
  torch::Tensor leftover;
  {
    CpuMemoryCounter::DeviceScope scope(1);
    leftover = torch::empty({kLeftover / 4}, torch::kFloat32);
  }
  probe.begin_case();
  probe.reset();
  {
    CpuMemoryCounter::DeviceScope scope(1);
    auto during_case = torch::empty({kCase / 4}, torch::kFloat32);
  }
  const auto memory = probe.read();
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_EQ(memory[0].held_before_bytes, std::optional<std::int64_t>(before0));
  EXPECT_EQ(memory[1].held_before_bytes, std::optional<std::int64_t>(before1 + kLeftover));
  EXPECT_EQ(memory[1].peak_allocated_bytes, std::optional<std::int64_t>(before1 + kLeftover + kCase));
}

TEST(MemoryProbe, HeldBytesCountEachStorageOnceOnItsDeviceUnderTheFirstKindThatNamesIt) {
  CpuMemoryCounter::install();
  const DeviceSet devices(DeviceKind::Cpu, 2, 1);
  MemoryProbe probe(devices, 2);
  torch::Tensor flat0, flat1, grad1, state1;
  {
    CpuMemoryCounter::DeviceScope scope(0);
    flat0 = torch::zeros({1000});  // 4000 B, two parameters are views of it
  }
  {
    CpuMemoryCounter::DeviceScope scope(1);
    flat1 = torch::zeros({100});   // 400 B
    grad1 = torch::zeros({50});    // 200 B
    state1 = torch::zeros({25});   // 100 B
  }
  HeldTensors held;
  held.parameters = {flat0.narrow(0, 0, 600), flat0.narrow(0, 600, 400), flat1};
  // A gradient that is a view of a parameter's storage (ZeRO-1's chunks) counts as the parameter's.
  held.gradients = {grad1, flat1.narrow(0, 0, 50), torch::Tensor()};
  held.optimizer_state = {state1, state1};
  auto memory = probe.read();
  probe.add_held_bytes(memory, held);
  ASSERT_EQ(memory.size(), 2u);
  EXPECT_EQ(memory[0].parameter_bytes, std::optional<std::int64_t>(4000));
  EXPECT_EQ(memory[0].gradient_bytes, std::optional<std::int64_t>(0));
  EXPECT_EQ(memory[1].parameter_bytes, std::optional<std::int64_t>(400));
  EXPECT_EQ(memory[1].gradient_bytes, std::optional<std::int64_t>(200));
  EXPECT_EQ(memory[1].optimizer_state_bytes, std::optional<std::int64_t>(100));

  // An optimizer whose state cannot be read: that kind is unknown, not zero.
  held.optimizer_state_known = false;
  probe.add_held_bytes(memory, held);
  EXPECT_FALSE(memory[1].optimizer_state_bytes.has_value());
  EXPECT_EQ(memory[1].gradient_bytes, std::optional<std::int64_t>(200));
  // Held by other processes: nothing here can tell.
  auto elsewhere = probe.read();
  HeldTensors other;
  other.held_by_other_processes = true;
  probe.add_held_bytes(elsewhere, other);
  EXPECT_FALSE(elsewhere[0].parameter_bytes.has_value());
}

TEST(CpuMemoryCounter, KnowsTheDeviceOfItsOwnAllocationsOnly) {
  CpuMemoryCounter::install();
  torch::Tensor t;
  {
    CpuMemoryCounter::DeviceScope scope(3);
    t = torch::empty({16});
  }
  EXPECT_EQ(CpuMemoryCounter::device_of(t.storage().data_ptr()), std::optional<int>(3));
  float outside[4] = {0, 0, 0, 0};
  const auto wrapped = torch::from_blob(outside, {4});
  EXPECT_FALSE(CpuMemoryCounter::device_of(wrapped.storage().data_ptr()).has_value());
}

TEST(MemoryProbe, ImbalanceIsDeviceZeroOverTheMeanOfTheOthers) {
  std::vector<DeviceMemory> m(3);
  m[0].peak_allocated_bytes = 300;
  m[1].peak_allocated_bytes = 100;
  m[2].peak_allocated_bytes = 200;
  EXPECT_DOUBLE_EQ(*memory_imbalance(m), 2.0);
  EXPECT_FALSE(memory_imbalance({m[0]}).has_value());
}

}  // namespace
}  // namespace ddpbench
