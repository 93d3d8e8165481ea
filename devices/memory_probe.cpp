#include "devices/memory_probe.h"

#include <sys/resource.h>

#include <fstream>
#include <string>
#include <unordered_set>

#include "devices/counting_allocator.h"
#include "compat/torch_compat.h"

namespace ddpbench {

MemoryProbe::MemoryProbe(const DeviceSet& devices, int devices_used, int first_cuda_device)
    : devices_(devices), devices_used_(devices_used), first_cuda_device_(first_cuda_device) {}

void MemoryProbe::begin_case() {
  held_before_.assign(static_cast<size_t>(devices_used_), std::nullopt);
  for (int d = 0; d < devices_used_; ++d) {
    if (devices_.is_cuda()) {
      compat::cuda_release_cached_memory(first_cuda_device_ + d);
      held_before_[static_cast<size_t>(d)] = compat::cuda_allocated_bytes(first_cuda_device_ + d);
    } else if (CpuMemoryCounter::installed()) {
      held_before_[static_cast<size_t>(d)] = CpuMemoryCounter::current_bytes(d);
    }
  }
}

void MemoryProbe::reset() {
  if (devices_.is_cuda()) {
    for (int d = 0; d < devices_used_; ++d) compat::cuda_reset_peak_memory(first_cuda_device_ + d);
  } else {
    CpuMemoryCounter::reset_peaks();
  }
  // Writing 5 to clear_refs restarts VmHWM (Linux >= 4.0); where refused, the peak spans the process.
  std::ofstream clear("/proc/self/clear_refs");
  if (clear) clear << "5";
}

std::vector<DeviceMemory> MemoryProbe::read() const {
  std::vector<DeviceMemory> out;
  for (int d = 0; d < devices_used_; ++d) {
    DeviceMemory m;
    m.device = d;
    m.kind = devices_.kind();
    if (devices_.is_cuda()) {
      m.device = first_cuda_device_ + d;
      const auto peak = compat::cuda_peak_memory(m.device);
      m.peak_allocated_bytes = peak.peak_allocated_bytes;
      m.peak_reserved_bytes = peak.peak_reserved_bytes;
    } else if (CpuMemoryCounter::installed()) {
      m.peak_allocated_bytes = CpuMemoryCounter::peak_bytes(d);
    }
    if (static_cast<size_t>(d) < held_before_.size()) m.held_before_bytes = held_before_[static_cast<size_t>(d)];
    out.push_back(m);
  }
  return out;
}

std::vector<std::optional<std::int64_t>> MemoryProbe::untracked_bytes(const HeldTensors& held) const {
  std::vector<DeviceMemory> kinds(static_cast<size_t>(devices_used_));
  add_held_bytes(kinds, held);
  std::vector<std::optional<std::int64_t>> out(kinds.size());
  for (int d = 0; d < devices_used_; ++d) {
    const auto& k = kinds[static_cast<size_t>(d)];
    if (!k.parameter_bytes || !k.gradient_bytes || !k.optimizer_state_bytes) continue;
    std::optional<std::int64_t> current;
    if (devices_.is_cuda()) {
      current = compat::cuda_allocated_bytes(first_cuda_device_ + d);
    } else if (CpuMemoryCounter::installed()) {
      current = CpuMemoryCounter::current_bytes(d);
    }
    if (current) out[static_cast<size_t>(d)] = *current - *k.parameter_bytes - *k.gradient_bytes - *k.optimizer_state_bytes;
  }
  return out;
}

void MemoryProbe::add_held_bytes(std::vector<DeviceMemory>& memory, const HeldTensors& held) const {
  if (held.held_by_other_processes) return;
  for (auto& m : memory) {
    m.parameter_bytes = 0;
    m.gradient_bytes = 0;
    m.optimizer_state_bytes = held.optimizer_state_known ? std::optional<std::int64_t>(0) : std::nullopt;
  }
  std::unordered_set<const void*> counted;  // storages, by their data: views and aliases count once
  auto count = [&](const std::vector<torch::Tensor>& tensors, std::optional<std::int64_t> DeviceMemory::*kind) {
    for (const auto& t : tensors) {
      if (!t.defined() || !t.has_storage()) continue;
      const auto& storage = t.storage();
      const void* data = storage.data_ptr().get();
      if (data == nullptr || !counted.insert(data).second) continue;
      std::optional<int> index;
      if (devices_.is_cuda()) {
        if (t.is_cuda()) index = t.get_device() - first_cuda_device_;
      } else if (t.device().is_cpu()) {
        index = CpuMemoryCounter::device_of(storage.data_ptr());
      }
      if (!index || *index < 0 || *index >= static_cast<int>(memory.size())) continue;
      auto& bytes = memory[static_cast<size_t>(*index)].*kind;
      if (bytes) *bytes += static_cast<std::int64_t>(storage.nbytes());
    }
  };
  count(held.parameters, &DeviceMemory::parameter_bytes);
  count(held.gradients, &DeviceMemory::gradient_bytes);
  count(held.optimizer_state, &DeviceMemory::optimizer_state_bytes);
}

std::optional<std::int64_t> MemoryProbe::process_peak_rss_bytes() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // reported in kB
  }
  return std::nullopt;
}

std::optional<MemoryProbe::AddressSpace> MemoryProbe::address_space() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return std::nullopt;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmSize:", 0) == 0) {
      return AddressSpace{std::stoll(line.substr(7)) * 1024, static_cast<std::int64_t>(limit.rlim_cur)};
    }
  }
  return std::nullopt;
}

std::optional<double> memory_imbalance(const std::vector<DeviceMemory>& memory) {
  if (memory.size() < 2 || !memory[0].peak_allocated_bytes) return std::nullopt;
  double others = 0;
  for (size_t i = 1; i < memory.size(); ++i) {
    if (!memory[i].peak_allocated_bytes) return std::nullopt;
    others += static_cast<double>(*memory[i].peak_allocated_bytes);
  }
  others /= static_cast<double>(memory.size() - 1);
  if (others <= 0) return std::nullopt;
  return static_cast<double>(*memory[0].peak_allocated_bytes) / others;
}

}  // namespace ddpbench
