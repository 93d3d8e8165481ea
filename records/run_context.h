#pragma once
// Everything about where and how a run happened, recorded once in the JSON context.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "devices/device_set.h"

namespace ddpbench {

struct DeviceInfo {
  int index = 0;
  std::string name;
  DeviceKind kind = DeviceKind::Cpu;
  std::int64_t total_memory_bytes = 0;
};

struct RunContext {
  std::string date;  // ISO 8601, local time with offset, as Google Benchmark writes it
  std::string host_name;
  std::string executable;
  int num_cpus = 0;
  std::vector<std::string> argv;
  std::string version;
  std::string git_sha;
  std::string build_type;
  std::string torch_version;
  std::optional<std::string> cuda_version;
  std::optional<std::string> nccl_version;
  std::vector<DeviceInfo> devices;
  std::vector<std::pair<std::string, std::string>> env;  // the variables that change results
};

RunContext collect_run_context(const std::vector<std::string>& argv);

// Environment variables recorded in the context: thread counts, device visibility, launchers and
// communication libraries.
bool is_relevant_env_var(const std::string& name);

}  // namespace ddpbench
