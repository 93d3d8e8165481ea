#include "cli/pipeline_flags.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/errors.h"
#include "cli/cli.h"
#include "pipeline/balance.h"
#include "pipeline/schedule.h"

namespace ddpbench {

void PipelineFlags::add_to(CLI::App& app) {
  app.add_option("--pp-schedule", schedule,
                 "pp: naive (one batch, one stage busy at a time) | gpipe | 1f1b (default) | interleaved-1f1b");
  app.add_option("--microbatches", microbatches,
                 "pp: micro-batches a step (default: 2 x stages, or the most below that which divides the batch)");
  app.add_option("--stages-per-rank", stages_per_rank, "pp, interleaved-1f1b: model chunks a rank holds (default 2)");
  app.add_option("--pp-balance", balance,
                 "pp: cut the stages so each takes about the same time (default: each unit's forward + backward "
                 "profiled on rank 0 first), holds about the same parameters (params), or units (even)");
  app.add_option("--pp-split", split, "pp: cut the chain of units before these units, by hand: 4,8 gives [0,4) [4,8) [8,end)");
}

PipelineOptions PipelineFlags::apply(bool runs_pp, const std::optional<int>& world_size) const {
  PipelineOptions pp;
  for (const auto& [flag, given] : std::vector<std::pair<const char*, bool>>{
           {"--pp-schedule", !schedule.empty()}, {"--microbatches", !microbatches.empty()},
           {"--stages-per-rank", !stages_per_rank.empty()}, {"--pp-balance", !balance.empty()},
           {"--pp-split", !split.empty()}}) {
    if (given && !runs_pp) throw UsageError(std::string(flag) + ": applies to pp only, which --strategy does not include");
  }
  if (!schedule.empty()) {
    const auto kind = pipeline::parse_schedule(schedule);
    if (!kind) throw UsageError("--pp-schedule: unknown schedule '" + schedule + "' (naive, gpipe, 1f1b, interleaved-1f1b)");
    pp.schedule = *kind;
  }
  // At most 2^16: a message tag packs micro-batch x 4096 + stage into an int (strategies/pp.cpp).
  if (!microbatches.empty()) pp.microbatches = static_cast<int>(parse_count("--microbatches", microbatches, 1, 1 << 16));
  if (!stages_per_rank.empty()) pp.stages_per_rank = static_cast<int>(parse_count("--stages-per-rank", stages_per_rank, 1, 1024));
  if (!balance.empty()) {
    const auto kind = pipeline::parse_balance(balance);
    if (!kind) throw UsageError("--pp-balance: unknown balance '" + balance + "' (time, params, even)");
    if (!split.empty()) throw UsageError("--pp-balance: cannot be given with --pp-split, which cuts by hand");
    pp.balance = *kind;
  }
  if (!split.empty()) {
    for (std::size_t start = 0; start <= split.size();) {
      const std::size_t comma = std::min(split.find(',', start), split.size());
      pp.split.push_back(static_cast<std::size_t>(parse_count("--pp-split", split.substr(start, comma - start), 1, 1 << 20)));
      start = comma + 1;
    }
    for (std::size_t i = 1; i < pp.split.size(); ++i) {
      if (pp.split[i] <= pp.split[i - 1]) throw UsageError("--pp-split " + split + ": cut points must rise");
    }
    // The stage count is the world's times the chunks a rank: a split of another count fits no case.
    const int chunks = pp.stages_per_rank > 0 ? pp.stages_per_rank : (pp.schedule == pipeline::ScheduleKind::Interleaved1F1B ? 2 : 1);
    if (world_size && pp.split.size() + 1 != static_cast<std::size_t>(*world_size * chunks)) {
      throw UsageError("--pp-split " + split + ": cuts " + std::to_string(pp.split.size() + 1) + " stages, and --world-size " +
                       std::to_string(*world_size) + (chunks > 1 ? " x " + std::to_string(chunks) + " chunks a rank" : "") +
                       " runs " + std::to_string(*world_size * chunks));
    }
  }
  // What the schedule refuses whatever the world and batch: --stages-per-rank outside
  // interleaved-1f1b, or below 2 in it; --microbatches under naive. (The rest depends on the case:
  // run/case_plan.h's validate_pipeline_flags, or the case's skip.)
  if (!stages_per_rank.empty() || (pp.schedule == pipeline::ScheduleKind::Naive && !microbatches.empty())) {
    pipeline::PipelineShape shape;
    shape.microbatches = pp.microbatches > 0 ? pp.microbatches : 1;
    shape.chunks_per_rank = pp.stages_per_rank > 0 ? pp.stages_per_rank : 1;
    if (auto why = pipeline::invalid_shape(pp.schedule, shape)) throw UsageError(*why);
  }
  return pp;
}

}  // namespace ddpbench
