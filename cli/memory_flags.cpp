#include "cli/memory_flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "base/errors.h"
#include "cli/cli.h"
#include "workloads/workload.h"

namespace ddpbench {

void MemoryLeverFlags::add_to(CLI::App& app) {
  app.add_option("--activation-checkpointing", activation_checkpointing,
                 "every strategy: none (default) | full (every wrap unit keeps only its input and recomputes its "
                 "forward in backward) | every:N (every N-th unit)");
  app.add_option("--grad-accum", grad_accum,
                 "every strategy: K micro-batches a step (pp: K rounds of its schedule), their gradients summed before one optimizer step "
                 "(default 1)");
  app.add_flag("--sync-every-microbatch", sync_every_microbatch,
               "ddp, zero1, zero2: with --grad-accum, all-reduce (reduce-scatter) after every micro-batch, not only the "
               "last (DDP without no_sync)");
  app.add_flag("--no-sync-accum", no_sync_accum,
               "fsdp (and tp on a --mesh with fsdp): with --grad-accum, keep the units' unsharded gradients until the last micro-batch and "
               "reduce-scatter once (FSDP2's set_requires_gradient_sync(False))");
}

MemoryLeverOptions MemoryLeverFlags::apply(const std::vector<std::string>& strategies, const std::vector<std::string>& workloads,
                                           const std::optional<std::int64_t>& global_batch, bool fsdp_tp_mesh) const {
  MemoryLeverOptions levers;
  auto runs = [&](const char* name) { return std::find(strategies.begin(), strategies.end(), name) != strategies.end(); };
  if (!grad_accum.empty()) {
    levers.grad_accum = static_cast<int>(parse_count("--grad-accum", grad_accum, 1, 4096));
    for (const auto& name : workloads) {
      const std::int64_t batch = global_batch.value_or(WorkloadRegistry::instance().get(name).default_global_batch());
      if (batch % levers.grad_accum != 0) {
        throw UsageError("--grad-accum: " + grad_accum + " micro-batches do not divide " + name + "'s batch of " +
                         std::to_string(batch) + (global_batch ? " (--batch)" : " (its default; --batch sets another)"));
      }
    }
  }
  for (const auto& [flag, given, applies] : std::vector<std::tuple<const char*, bool, bool>>{
           {"--sync-every-microbatch", sync_every_microbatch, runs("ddp") || runs("zero1") || runs("zero2")},
           {"--no-sync-accum", no_sync_accum, runs("fsdp") || (fsdp_tp_mesh && runs("tp"))}}) {
    if (!given) continue;
    if (levers.grad_accum < 2) throw UsageError(std::string(flag) + ": needs --grad-accum 2 or more");
    if (!applies) {
      throw UsageError(std::string(flag) + ": applies to " + (std::string(flag) == "--no-sync-accum" ? "fsdp (or a --mesh with fsdp and tp)" : "ddp, zero1 and zero2") +
                       " only, which --strategy does not include");
    }
  }
  levers.sync_every_microbatch = sync_every_microbatch;
  levers.no_sync_accum = no_sync_accum;
  if (!activation_checkpointing.empty()) {
    try {
      levers.activation_checkpointing = CheckpointPolicy::parse(activation_checkpointing);
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--activation-checkpointing: ") + e.what());
    }
    if (levers.activation_checkpointing.enabled()) {
      // The units are checkpointed where the model runs them (a chain's forward_range): a model
      // that is none would run with nothing checkpointed, which must not pass for a measurement.
      for (const auto& name : workloads) {
        const auto facts = WorkloadRegistry::instance().get(name).facts();
        if (facts.chain_length == 0) {
          throw UsageError("--activation-checkpointing: workload " + name + " cannot be checkpointed by unit: " +
                           facts.chain_refusal);
        }
      }
    }
  }
  return levers;
}

}  // namespace ddpbench
