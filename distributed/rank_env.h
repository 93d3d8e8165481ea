#pragma once
// Which rank of which group this process is, when a launcher started it: ddpbench's own (which
// sets the same variables as torchrun), torchrun (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT) or Slurm (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, with
// MASTER_ADDR/MASTER_PORT). Parsing only: nothing connects here.
#include <functional>
#include <optional>
#include <string>

namespace ddpbench {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this host: their cores are shared among them
  std::string master_addr;
  int master_port = 0;
  std::string launcher;      // "torchrun" or "slurm" (ddpbench's own launcher looks like torchrun)
  // ddpbench's launcher hosts the rendezvous store itself (as torchrun's agent does), so every
  // rank, rank 0 included, connects to it as a client; prefix of this group's keys in it.
  bool launcher_hosts_store = false;
  std::string store_prefix = "ddpbench";
  int launcher_pid = 0;      // ends this rank with its launcher (PR_SET_PDEATHSIG)
};

using GetEnv = std::function<const char*(const char*)>;

// The rank this process is, or nothing when no launcher's variables are set. Throws UsageError
// naming the variable on a missing, malformed or inconsistent value (e.g. RANK >= WORLD_SIZE).
std::optional<RankEnv> rank_env_from(const GetEnv& getenv);
std::optional<RankEnv> rank_env_from_environment();

}  // namespace ddpbench
