#include "run/case_plan.h"

#include <algorithm>

#include "base/errors.h"
#include "compat/torch_compat.h"
#include "devices/precision.h"
#include "distributed/process_group.h"

namespace ddpbench {
namespace {

// The peak rate of every device the case computes on, when known.
std::optional<PeakFlops> case_peak(const RunnerOptions& options, const DeviceSet& devices, const StrategyInfo& info,
                                   const CaseSpec& spec) {
  std::optional<PeakFlops> one;
  if (options.peak_flops) {
    one = PeakFlops{*options.peak_flops, "--peak-tflops"};
  } else if (devices.is_cuda()) {
    one = datasheet_peak_flops(compat::cuda_device_name(devices.device(0).index()), options.precision);
  }
  if (!one) return std::nullopt;
  const int used = devices.is_cuda() && info.one_cuda_device ? 1 : spec.world_size;
  return PeakFlops{one->flops_per_second * used, one->source + (used > 1 ? " x " + std::to_string(used) + " devices" : "")};
}

}  // namespace

std::int64_t global_batch_for(const RunnerOptions& options, const Workload& workload) {
  return options.global_batch.value_or(workload.default_global_batch());
}

void validate_plan(const RunnerOptions& options, const DeviceSet& devices) {
  const std::string dtype_reason =
      precision_unsupported_reason(options.precision, devices.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
  if (!dtype_reason.empty()) throw UsageError("--dtype: " + dtype_reason);
  for (const auto& w : options.workloads) {
    const auto& workload = WorkloadRegistry::instance().get(w);
    const std::int64_t batch = global_batch_for(options, workload);
    const std::int64_t dataset = options.dataset_size.value_or(32 * batch);
    for (const auto& s : options.strategies) {
      const auto& info = StrategyRegistry::instance().get(s);
      // tp gives every rank the whole batch: a batch of one splits a model over any number of ranks.
      if (info.uses_all_devices && !info.needs_tensor_parallel_plan && batch < devices.size()) {
        throw UsageError("--batch: global batch " + std::to_string(batch) + " is smaller than the world size " +
                         std::to_string(devices.size()) + " (" + s + " on " + w + " needs a sample per device)");
      }
    }
    if (dataset < batch) {
      throw UsageError("--dataset-size: " + std::to_string(dataset) + " samples cannot fill a global batch of " +
                       std::to_string(batch) + " (" + w + ")");
    }
  }
  validate_pipeline_flags(options, devices);
}

// pp's own flags (--microbatches, --stages-per-rank, --pp-split) that shape no case of the run: bad
// input, one line and exit 2. Where they shape one workload's case and not another's, the other's
// is skipped saying why, as a case the world or batch does not fit is.
void validate_pipeline_flags(const RunnerOptions& options, const DeviceSet& devices) {
  const auto& pp = options.strategy.pipeline;
  const bool runs_pp = std::find(options.strategies.begin(), options.strategies.end(), "pp") != options.strategies.end();
  if (!runs_pp || (pp.microbatches == 0 && pp.stages_per_rank == 0 && pp.split.empty())) return;
  std::optional<std::string> first;
  for (const auto& w : options.workloads) {
    CaseSpec spec;
    spec.workload = w;
    spec.strategy = "pp";
    spec.world_size = devices.size();
    spec.global_batch = global_batch_for(options, WorkloadRegistry::instance().get(w));
    const auto reason = StrategyRegistry::instance().get("pp").create()->unsupported_reason(spec, devices, options.strategy);
    const bool names_a_given_flag = reason && ((pp.microbatches > 0 && reason->find("--microbatches") != std::string::npos) ||
                                               (pp.stages_per_rank > 0 && reason->find("--stages-per-rank") != std::string::npos) ||
                                               (!pp.split.empty() && reason->find("--pp-split") != std::string::npos));
    if (!names_a_given_flag) return;  // this workload's case takes the flags
    if (!first) first = *reason + (reason->find("(" + w + ")") == std::string::npos ? " (" + w + ")" : "");
  }
  if (first) throw UsageError(*first);
}

std::vector<CaseRecord> plan_cases(const RunnerOptions& options, const DeviceSet& devices,
                                   const ProcessGroupContext* group, bool has_launcher) {
  std::vector<CaseRecord> cases;
  for (const auto& w : options.workloads) {
    const auto& workload = WorkloadRegistry::instance().get(w);
    auto facts = workload.facts();
    facts.sequence.saved_score_element_bytes =
        softmax_element_bytes(options.precision, devices.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
    for (const auto& s : options.strategies) {
      const auto& info = StrategyRegistry::instance().get(s);
      CaseRecord c;
      c.spec.workload = w;
      c.spec.strategy = s;
      c.spec.world_size = info.uses_all_devices ? devices.size() : 1;
      if (group && !info.multi_process) {
        c.status = CaseStatus::Skipped;
        c.reason = "this process is rank " + std::to_string(group->rank()) + " of " + std::to_string(group->size()) +
                   " started by a launcher: only multi-process strategies run across ranks";
      }
      c.spec.global_batch = global_batch_for(options, workload);
      c.device_kind = devices.kind();
      c.threads_per_device = devices.threads_per_device();
      c.facts = facts;
      c.peak = case_peak(options, devices, info, c.spec);
      if (info.uses_all_devices && c.spec.world_size == 1) {
        c.note = "world size 1: " + s + " degenerates to one device (use --world-size 2 or more to compare)";
      }
      if (info.multi_process && !group && !has_launcher) {
        c.status = CaseStatus::Skipped;
        c.reason = "needs rank processes: run it through the ddpbench executable or a launcher (torchrun, srun)";
      }
      if (c.status != CaseStatus::Ok) {
      } else if (auto reason = info.create()->unsupported_reason(c.spec, devices, options.strategy)) {
        c.status = CaseStatus::Skipped;
        c.reason = *reason;
      } else if (auto note = info.create()->case_note(c.spec, facts); note && c.note.empty()) {
        c.note = *note;
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

}  // namespace ddpbench
