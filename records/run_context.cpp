#include "records/run_context.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <ctime>
#include <fstream>

#include "base/build_info.h"
#include "base/utf8.h"
#include "compat/torch_compat.h"

extern char** environ;

namespace ddpbench {
namespace {

std::string iso_date_now() {
  std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 64> buf{};
  std::strftime(buf.data(), buf.size(), "%Y-%m-%dT%H:%M:%S%z", &local);
  std::string s(buf.data());
  if (s.size() > 5) s.insert(s.size() - 2, ":");  // +0000 -> +00:00
  return s;
}

std::string read_first_match(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key, 0) == 0) {
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      auto value = line.substr(colon + 1);
      value.erase(0, value.find_first_not_of(" \t"));
      return value;
    }
  }
  return {};
}

}  // namespace

bool is_relevant_env_var(const std::string& name) {
  static const char* exact[] = {"CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
                                "OPENBLAS_NUM_THREADS", "MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE",
                                "LOCAL_RANK", "LOCAL_WORLD_SIZE", "CUDA_LAUNCH_BLOCKING",
                                "NVTX_INJECTION64_PATH"};
  static const char* prefixes[] = {"NCCL_", "GLOO_", "TORCH_", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID",
                                   "SLURM_JOB_ID", "SLURM_NODELIST", "OMP_", "KMP_", "GOMP_"};
  for (const char* e : exact) {
    if (name == e) return true;
  }
  for (const char* p : prefixes) {
    if (name.rfind(p, 0) == 0) return true;
  }
  return false;
}

RunContext collect_run_context(const std::vector<std::string>& argv) {
  RunContext c;
  c.date = iso_date_now();
  std::array<char, 256> host{};
  // What the machine says of itself goes into the JSON whatever its bytes: bad ones as \xHH.
  if (gethostname(host.data(), host.size() - 1) == 0) c.host_name = escape_invalid_utf8(host.data());
  std::array<char, 4096> exe{};
  const ssize_t n = readlink("/proc/self/exe", exe.data(), exe.size() - 1);
  c.executable = escape_invalid_utf8(n > 0 ? std::string(exe.data(), static_cast<size_t>(n)) : (argv.empty() ? "" : argv[0]));
  c.num_cpus = available_cpus();
  for (const auto& a : argv) c.argv.push_back(escape_invalid_utf8(a));
  c.version = build_version();
  c.git_sha = build_git_sha();
  c.build_type = build_type();
  c.torch_version = compat::torch_version();
  c.cuda_version = compat::cuda_version();
  c.nccl_version = compat::nccl_version();

  DeviceInfo cpu;
  cpu.index = 0;
  cpu.kind = DeviceKind::Cpu;
  cpu.name = escape_invalid_utf8(read_first_match("/proc/cpuinfo", "model name"));
  if (cpu.name.empty()) cpu.name = "cpu";
  const std::string mem_kb = read_first_match("/proc/meminfo", "MemTotal");
  cpu.total_memory_bytes = mem_kb.empty() ? 0 : std::stoll(mem_kb) * 1024;
  c.devices.push_back(cpu);
  for (int i = 0; i < compat::cuda_device_count(); ++i) {
    c.devices.push_back({i, compat::cuda_device_name(i), DeviceKind::Cuda, compat::cuda_device_total_memory(i)});
  }

  for (char** e = environ; e && *e; ++e) {
    const std::string entry(*e);
    const auto eq = entry.find('=');
    if (eq == std::string::npos) continue;
    std::string name = entry.substr(0, eq);
    if (is_relevant_env_var(name)) c.env.emplace_back(escape_invalid_utf8(name), escape_invalid_utf8(entry.substr(eq + 1)));
  }
  std::sort(c.env.begin(), c.env.end());
  return c;
}

}  // namespace ddpbench
