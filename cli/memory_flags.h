#pragma once
// The memory levers' flags (--activation-checkpointing, --grad-accum, --sync-every-microbatch,
// --no-sync-accum): added to the command line, then checked
// against the strategies and workloads run and turned into MemoryLeverOptions. Each refusal is a
// UsageError naming the flag (docs/memory.md).
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strategies/strategy.h"

namespace CLI {
class App;
}

namespace ddpbench {

struct MemoryLeverFlags {
  std::string activation_checkpointing, grad_accum;  // as given; empty: not given
  bool sync_every_microbatch = false, no_sync_accum = false;

  void add_to(CLI::App& app);
  // `strategies` and `workloads`: those run (a model that is no chain cannot be checkpointed by
  // unit); `global_batch`: --batch, if given (else each workload's own), which K must divide;
  // `fsdp_tp_mesh`: --mesh shards tp's shares over fsdp (--no-sync-accum applies to tp there).
  MemoryLeverOptions apply(const std::vector<std::string>& strategies, const std::vector<std::string>& workloads,
                           const std::optional<std::int64_t>& global_batch, bool fsdp_tp_mesh = false) const;
};

}  // namespace ddpbench
