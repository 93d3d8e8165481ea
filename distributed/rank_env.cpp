#include "distributed/rank_env.h"

#include <cstdlib>
#include <algorithm>
#include <cerrno>
#include <string>

#include "base/errors.h"

namespace ddpbench {
namespace {

int parse_int(const char* name, const char* value, long min, long max) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(value, &end, 10);
  if (errno != 0 || end == value || *end != '\0' || v < min || v > max) {
    throw UsageError(std::string(name) + "=" + value + ": expected a whole number in [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return static_cast<int>(v);
}

const char* required(const GetEnv& getenv, const char* name, const char* because) {
  const char* v = getenv(name);
  if (v == nullptr || *v == '\0') throw UsageError(std::string(name) + " is not set (" + because + ")");
  return v;
}

// Slurm writes tasks per node as "2" or "2(x3)" or "2,1"; the first count is this layout's share.
int slurm_tasks_per_node(const char* value, int fallback) {
  if (value == nullptr) return fallback;
  const int n = std::atoi(value);
  return n > 0 ? n : fallback;
}

}  // namespace

std::optional<RankEnv> rank_env_from(const GetEnv& getenv) {
  RankEnv env;
  const bool torchrun = getenv("RANK") != nullptr || getenv("WORLD_SIZE") != nullptr;
  // A Slurm allocation alone is no launch: an interactive shell inside one has SLURM_PROCID too.
  const bool slurm = !torchrun && getenv("SLURM_PROCID") != nullptr && getenv("MASTER_ADDR") != nullptr;
  if (!torchrun && !slurm) return std::nullopt;

  constexpr long kMaxRanks = 1 << 20;
  if (torchrun) {
    const char* why = "a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT";
    env.launcher = "torchrun";
    env.world_size = parse_int("WORLD_SIZE", required(getenv, "WORLD_SIZE", why), 1, kMaxRanks);
    env.rank = parse_int("RANK", required(getenv, "RANK", why), 0, kMaxRanks);
    if (env.rank >= env.world_size) {
      throw UsageError("RANK=" + std::to_string(env.rank) + " is not below WORLD_SIZE=" + std::to_string(env.world_size));
    }
    const char* local = getenv("LOCAL_RANK");
    env.local_rank = local ? parse_int("LOCAL_RANK", local, 0, env.world_size - 1) : env.rank;
    const char* local_world = getenv("LOCAL_WORLD_SIZE");
    env.local_world_size = local_world ? parse_int("LOCAL_WORLD_SIZE", local_world, 1, env.world_size) : env.world_size;
    if (env.local_rank >= env.local_world_size) {
      throw UsageError("LOCAL_RANK=" + std::to_string(env.local_rank) + " is not below LOCAL_WORLD_SIZE=" +
                       std::to_string(env.local_world_size));
    }
  } else {
    const char* why = "a Slurm launch sets SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID";
    env.launcher = "slurm";
    env.world_size = parse_int("SLURM_NTASKS", required(getenv, "SLURM_NTASKS", why), 1, kMaxRanks);
    env.rank = parse_int("SLURM_PROCID", required(getenv, "SLURM_PROCID", why), 0, kMaxRanks);
    if (env.rank >= env.world_size) {
      throw UsageError("SLURM_PROCID=" + std::to_string(env.rank) + " is not below SLURM_NTASKS=" +
                       std::to_string(env.world_size));
    }
    env.local_rank = parse_int("SLURM_LOCALID", required(getenv, "SLURM_LOCALID", why), 0, env.world_size - 1);
    env.local_world_size = std::max(env.local_rank + 1, slurm_tasks_per_node(getenv("SLURM_NTASKS_PER_NODE"),
                                                                             slurm_tasks_per_node(getenv("SLURM_TASKS_PER_NODE"), 1)));
  }
  const char* where = "the rendezvous address of rank 0's host";
  env.master_addr = required(getenv, "MASTER_ADDR", where);
  env.master_port = parse_int("MASTER_PORT", required(getenv, "MASTER_PORT", where), 1, 65535);

  if (const char* v = getenv("DDPBENCH_LAUNCHER_STORE"); v != nullptr && std::string(v) == "1") {
    env.launcher_hosts_store = true;
  }
  if (const char* v = getenv("DDPBENCH_STORE_PREFIX"); v != nullptr && *v != '\0') env.store_prefix = v;
  if (const char* v = getenv("DDPBENCH_LAUNCHER_PID"); v != nullptr) env.launcher_pid = std::atoi(v);
  return env;
}

std::optional<RankEnv> rank_env_from_environment() {
  return rank_env_from([](const char* name) { return std::getenv(name); });
}

}  // namespace ddpbench
