#include "devices/counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <mutex>

#include "compat/torch_compat.h"

namespace ddpbench {
namespace {

struct DeviceCounter {
  std::atomic<std::int64_t> current{0};
  std::atomic<std::int64_t> peak{0};
};
DeviceCounter g_counters[CpuMemoryCounter::kMaxDevices];
thread_local int t_device = 0;
std::atomic<bool> g_installed{false};

// Freed CPU buffers stay in the process for the next allocation of their size, as a GPU's caching
// allocator keeps its blocks. glibc otherwise returns every freed block above its mmap threshold to
// the kernel, and fsdp, which frees and allocates each unit's full buffers every step, then touches
// fresh pages every step: with trixie's glibc 2.41 and LibTorch 2.6, mlp under fsdp at world 2 took
// 110-180 ms a step instead of 25 on the development VM, page faults, not the strategy. Buffers of
// up to 32 MiB (glibc's largest threshold) come from the heap, which is not trimmed below 1 GiB.
// The peer benchmarks give PyTorch the same settings (benchmarks/interleave.py).
void keep_freed_buffers_for_reuse() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
#endif
}

void add_bytes(int device, std::int64_t bytes) {
  auto& c = g_counters[device];
  const std::int64_t now = c.current.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  std::int64_t peak = c.peak.load(std::memory_order_relaxed);
  while (now > peak && !c.peak.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

// Bookkeeping lives in a header in front of the user's bytes, so the data pointer is also the
// context (raw_allocate/raw_deallocate keep working) and no second heap allocation is needed.
struct alignas(64) AllocationHeader {
  void* inner_context;
  c10::DeleterFnPtr inner_deleter;
  std::int64_t bytes;
  int device;
};
static_assert(sizeof(AllocationHeader) == 64, "the header keeps the 64-byte alignment of the data");

void delete_counted(void* data) {
  auto* header = static_cast<AllocationHeader*>(data) - 1;
  g_counters[header->device].current.fetch_sub(header->bytes, std::memory_order_relaxed);
  header->inner_deleter(header->inner_context);
}

class CountingCpuAllocator final : public compat::WrappingAllocator {
 public:
  using WrappingAllocator::WrappingAllocator;

  c10::DataPtr allocate(size_t n) DDPBENCH_ALLOCATE_QUALIFIER override {
    c10::DataPtr inner_ptr = inner()->allocate(n + sizeof(AllocationHeader));
    const c10::Device device = inner_ptr.device();
    auto* header = static_cast<AllocationHeader*>(inner_ptr.get());
    header->bytes = static_cast<std::int64_t>(n);
    header->device = t_device;
    header->inner_deleter = inner_ptr.get_deleter();
    header->inner_context = inner_ptr.release_context();
    add_bytes(header->device, header->bytes);
    void* data = header + 1;
    return {data, data, &delete_counted, device};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }
};

}  // namespace

void CpuMemoryCounter::install() {
  static std::once_flag once;
  std::call_once(once, [] {
    keep_freed_buffers_for_reuse();
    static CountingCpuAllocator allocator(c10::GetCPUAllocator());
    // Priority above LibTorch's default registration, so it is not replaced behind our back.
    c10::SetCPUAllocator(&allocator, /*priority=*/100);
    g_installed = true;
  });
}

bool CpuMemoryCounter::installed() { return g_installed.load(); }

CpuMemoryCounter::DeviceScope::DeviceScope(int device) : previous_(t_device) {
  t_device = std::clamp(device, 0, kMaxDevices - 1);
}
CpuMemoryCounter::DeviceScope::~DeviceScope() { t_device = previous_; }

int CpuMemoryCounter::current_device() { return t_device; }

std::optional<int> CpuMemoryCounter::device_of(const c10::DataPtr& data) {
  if (data.get_deleter() != &delete_counted || data.get_context() == nullptr) return std::nullopt;
  return (static_cast<const AllocationHeader*>(data.get_context()) - 1)->device;
}

std::int64_t CpuMemoryCounter::current_bytes(int device) { return g_counters[device].current.load(); }
std::int64_t CpuMemoryCounter::peak_bytes(int device) { return g_counters[device].peak.load(); }

void CpuMemoryCounter::reset_peaks() {
  for (auto& c : g_counters) c.peak.store(c.current.load());
}

}  // namespace ddpbench
