#include "devices/counting_allocator.h"

#include <c10/core/CPUAllocator.h>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <atomic>
#include <map>
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

// Freed blocks above glibc's largest mmap threshold (32 MiB), kept by their size for the next
// allocation of that size, as a GPU's caching allocator keeps its blocks: glibc gives every such
// block back to the kernel, and the next one of the size (each step's gradients, a gathered unit, a
// float64 copy of a large layer) costs a page fault per 4 KiB. Measured on the development VM before
// this cache: wide-logits' float64 parity pass (its 32768x512 layer's 128 MiB tensors) spent more
// time in the kernel than in LibTorch. Bounded by kMaxCachedBytes; an allocation that fails first
// empties the cache and tries again, so a limit on the address space sees no cached block.
constexpr std::size_t kLargeBlockBytes = std::size_t{32} << 20;
constexpr std::size_t kMaxCachedBytes = std::size_t{1} << 30;

struct CachedBlock {
  void* inner_context;
  c10::DeleterFnPtr inner_deleter;
  AllocationHeader* header;
};

class LargeBlockCache {
 public:
  // A cached block of exactly `total` bytes (header included), or none.
  std::optional<CachedBlock> take(std::size_t total) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.find(total);
    if (it == blocks_.end()) return std::nullopt;
    CachedBlock block = it->second;
    blocks_.erase(it);
    cached_ -= total;
    return block;
  }
  // Keeps the block if the cache has room for it; false where the caller must free it.
  bool keep(std::size_t total, const CachedBlock& block) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (cached_ + total > kMaxCachedBytes) return false;
    blocks_.emplace(total, block);
    cached_ += total;
    return true;
  }
  // Frees every cached block; whether there was one.
  bool release_all() {
    std::multimap<std::size_t, CachedBlock> blocks;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      blocks.swap(blocks_);
      cached_ = 0;
    }
    for (auto& [total, block] : blocks) block.inner_deleter(block.inner_context);
    return !blocks.empty();
  }

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, CachedBlock> blocks_;
  std::size_t cached_ = 0;
};
LargeBlockCache g_large_blocks;

void delete_counted(void* data) {
  auto* header = static_cast<AllocationHeader*>(data) - 1;
  g_counters[header->device].current.fetch_sub(header->bytes, std::memory_order_relaxed);
  const std::size_t total = static_cast<std::size_t>(header->bytes) + sizeof(AllocationHeader);
  if (total >= kLargeBlockBytes && g_large_blocks.keep(total, {header->inner_context, header->inner_deleter, header})) return;
  header->inner_deleter(header->inner_context);
}

class CountingCpuAllocator final : public compat::WrappingAllocator {
 public:
  using WrappingAllocator::WrappingAllocator;

  c10::DataPtr allocate(size_t n) DDPBENCH_ALLOCATE_QUALIFIER override {
    const std::size_t total = n + sizeof(AllocationHeader);
    AllocationHeader* header = nullptr;
    if (total >= kLargeBlockBytes) {
      if (auto cached = g_large_blocks.take(total)) {
        header = cached->header;
        header->inner_deleter = cached->inner_deleter;
        header->inner_context = cached->inner_context;
      }
    }
    if (header == nullptr) {
      c10::DataPtr inner_ptr = allocate_inner(total);
      header = static_cast<AllocationHeader*>(inner_ptr.get());
      header->inner_deleter = inner_ptr.get_deleter();
      header->inner_context = inner_ptr.release_context();
    }
    header->bytes = static_cast<std::int64_t>(n);
    header->device = t_device;
    add_bytes(header->device, header->bytes);
    void* data = header + 1;
    return {data, data, &delete_counted, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override { return &delete_counted; }

 private:
  // The inner allocator's block; where it fails (no memory, an address-space limit), the cached
  // blocks go back first and it is asked once more, so the cache never turns a fit into a failure.
  c10::DataPtr allocate_inner(std::size_t total) const {
    try {
      return inner()->allocate(total);
    } catch (const c10::Error&) {
      if (!g_large_blocks.release_all()) throw;
    }
    return inner()->allocate(total);
  }
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
