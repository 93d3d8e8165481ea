#include "records/results.h"

#include <algorithm>

#include "base/stats.h"

namespace ddpbench {

const char* to_string(CaseStatus status) {
  switch (status) {
    case CaseStatus::Ok: return "ok";
    case CaseStatus::Skipped: return "skipped";
    case CaseStatus::NotRun: return "not_run";
    case CaseStatus::Failed: return "failed";
    case CaseStatus::Oom: return "oom";
  }
  return "unknown";
}

double RepetitionRecord::mean_step_seconds() const { return stats::mean(step_seconds); }

double RepetitionRecord::lower_quartile_step_seconds() const { return stats::percentile(step_seconds, 0.25); }

std::optional<double> RepetitionRecord::straggler_spread() const {
  if (ranks.size() < 2) return std::nullopt;
  std::vector<double> own_work;
  for (const auto& r : ranks) {
    double waiting = 0;
    for (Phase p : {Phase::CommExposed, Phase::ReduceScatterExposed, Phase::AllGatherExposed, Phase::PipelineWait}) {
      waiting += r.phase_seconds[static_cast<int>(p)];
    }
    own_work.push_back(r.mean_step_seconds - waiting);
  }
  const double median = stats::median(own_work);
  if (median <= 0) return std::nullopt;
  return *std::max_element(own_work.begin(), own_work.end()) / median;
}

std::int64_t ring_bytes_sent(const CommSummary& comm) {
  const std::int64_t n = comm.world_size;
  if (n < 2) return 0;
  const std::int64_t payload =
      2 * comm.bytes_per_step + comm.reduce_scatter_bytes_per_step + comm.all_gather_bytes_per_step;
  return payload * (n - 1) / n + comm.point_to_point_bytes_per_step;
}

std::optional<std::int64_t> other_peak_bytes(const DeviceMemory& memory) {
  if (!memory.peak_allocated_bytes || !memory.parameter_bytes || !memory.gradient_bytes ||
      !memory.optimizer_state_bytes) {
    return std::nullopt;
  }
  return *memory.peak_allocated_bytes - *memory.parameter_bytes - *memory.gradient_bytes - *memory.optimizer_state_bytes;
}

std::optional<double> bus_bandwidth(const CommSummary& comm) {
  if (!comm.collective_seconds_measured || comm.allreduce_seconds_per_step <= 0 || comm.world_size < 2) return std::nullopt;
  const double n = comm.world_size;
  return static_cast<double>(comm.bytes_per_step) * 2 * (n - 1) / n / comm.allreduce_seconds_per_step;
}

std::vector<double> CaseRecord::repetition_means() const {
  std::vector<double> means;
  for (const auto& r : repetitions) means.push_back(r.mean_step_seconds());
  return means;
}

std::vector<double> CaseRecord::repetition_lower_quartiles() const {
  std::vector<double> quartiles;
  for (const auto& r : repetitions) quartiles.push_back(r.lower_quartile_step_seconds());
  return quartiles;
}

double CaseRecord::median_step_seconds() const { return stats::median(repetition_means()); }

double CaseRecord::median_items_per_second() const {
  std::vector<double> rates;
  for (const auto& r : repetitions) rates.push_back(static_cast<double>(spec.global_batch) / r.mean_step_seconds());
  return stats::median(rates);
}

namespace {

// An asynchronous case's final loss against single's at the same samples seen, if single ran.
std::optional<LossVsSingle> loss_against_single(const RunRecord& record, const CaseRecord& c) {
  auto median_final_loss = [](const CaseRecord& r) {
    std::vector<double> losses;
    for (const auto& rep : r.repetitions) losses.push_back(rep.final_loss);
    return stats::median(losses);
  };
  for (const auto& base : record.cases) {
    if (base.spec.workload != c.spec.workload || base.spec.strategy != "single" || !base.measured()) continue;
    // Every repetition restarts from the same weights and batches, so the last measured step of
    // each has seen the same samples under either strategy.
    LossVsSingle l;
    l.samples_seen = static_cast<std::int64_t>(record.settings.warmup + record.settings.steps) * c.spec.global_batch;
    l.loss = median_final_loss(c);
    l.reference_loss = median_final_loss(base);
    return l;
  }
  return std::nullopt;
}

}  // namespace

void set_noise_floor(RunRecord& record) {
  record.noise_floor.clear();
  for (const auto& c : record.cases) {
    if (c.spec.strategy == "single" && c.measured() && c.repetitions.size() >= 2) {
      record.noise_floor.push_back(
          {c.spec.workload, stats::cv(c.repetition_means()), static_cast<int>(c.repetitions.size())});
    }
  }
  for (auto& c : record.cases) {
    c.cv_over_noise_floor.reset();
    for (const auto& floor : record.noise_floor) {
      if (floor.workload == c.spec.workload && floor.cv > 0 && c.measured() && c.repetitions.size() >= 2) {
        c.cv_over_noise_floor = stats::cv(c.repetition_means()) / floor.cv;
      }
    }
  }
}

void set_comparative_figures(RunRecord& record) {
  // scaling efficiency = throughput(N) / (N x throughput(single)), where single ran on this workload.
  for (auto& c : record.cases) {
    if (c.repetitions.empty()) continue;
    for (const auto& base : record.cases) {
      if (base.spec.workload == c.spec.workload && base.spec.strategy == "single" && base.measured()) {
        c.scaling_efficiency = c.median_items_per_second() / (c.spec.world_size * base.median_items_per_second());
      }
    }
    if (StrategyRegistry::instance().get(c.spec.strategy).asynchronous) c.loss_vs_single = loss_against_single(record, c);
    c.noisy = c.repetitions.size() >= 2 && stats::cv(c.repetition_means()) > record.settings.max_cv;
    for (int p = 0; p < kPhaseCount; ++p) {
      bool used = false;
      for (const auto& r : c.repetitions) used = used || r.phase_seconds[p] > 0;
      if (used) c.phases_used.push_back(static_cast<Phase>(p));
    }
  }
  set_noise_floor(record);
}

}  // namespace ddpbench
