#include "run/parity.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "base/errors.h"
#include "devices/counting_allocator.h"
#include "distributed/process_group.h"
#include "run/stop_request.h"
#include "timing/phase_recorder.h"

namespace ddpbench {
namespace {

// Six significant digits, as %g writes them: a tolerance of 1e-09 must not read "0.000000".
std::string parity_number(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

// Norm-wise relative error of the whole parameter vector: max |p - p_ref| over every element divided
// by max |p_ref| over every element. Per-tensor ratios are no measure: a tensor initialised to zero
// (a bias) has a scale of one learning rate after a step, so any rounding looks like a large error.
// Each parameter's own max |p - p_ref|, over the same scale, says where a difference is.
struct Difference {
  double whole = 0;
  std::vector<double> per_parameter;
};
Difference relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) throw CaseFailure("parity: parameter count differs from single's");
  double scale = 1e-12;
  Difference d;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto ref = b[i].to(torch::kCPU, torch::kFloat64);
    const auto got = a[i].to(torch::kCPU, torch::kFloat64);
    if (got.sizes() != ref.sizes()) throw CaseFailure("parity: parameter shapes differ from single's");
    scale = ref.numel() == 0 ? scale : std::max(scale, ref.abs().max().item<double>());
    d.per_parameter.push_back(ref.numel() == 0 ? 0.0 : (got - ref).abs().max().item<double>());
  }
  for (auto& v : d.per_parameter) {
    v /= scale;
    d.whole = std::max(d.whole, v);
  }
  return d;
}

// The (up to) three parameters that differ most beyond `tolerance`, by name, worst first.
std::string worst_parameters(const Difference& d, double tolerance, const std::vector<std::string>& names) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < d.per_parameter.size(); ++i) {
    if (!(d.per_parameter[i] <= tolerance)) order.push_back(i);  // NaN too
  }
  std::stable_sort(order.begin(), order.end(), [&](std::size_t x, std::size_t y) { return d.per_parameter[x] > d.per_parameter[y]; });
  std::string out;
  for (std::size_t n = 0; n < order.size() && n < 3; ++n) {
    const std::size_t i = order[n];
    out += (n ? ", " : "") + (i < names.size() ? names[i] : "#" + std::to_string(i)) + " " + parity_number(d.per_parameter[i]);
  }
  if (order.size() > 3) out += " and " + std::to_string(order.size() - 3) + " more";
  return out;
}

}  // namespace

ParityCheck::Reference ParityCheck::train_untimed(const CaseSpec& spec, int steps) {
  const auto& workload = WorkloadRegistry::instance().get(spec.workload);
  const auto& dataset = builder_.dataset_for(workload, spec.global_batch);
  auto strategy = builder_.start_strategy(spec, parity_optimizer(workload), steps, /*parity_run=*/true);
  BatchLoader loader = builder_.make_loader(dataset, spec, *strategy);
  const auto dtype = builder_.parity_dtype_of(spec);
  PhaseRecorder phases;
  Reference out;
  for (int i = 0; i < steps; ++i) {
    if (stop_requested()) throw StopRequested();  // parity steps end on a signal as measured ones do
    Batch batch = loader.next();
    if (batch.inputs.is_floating_point()) batch.inputs = batch.inputs.to(dtype);
    if (batch.targets.is_floating_point()) batch.targets = batch.targets.to(dtype);
    phases.begin_step();
    auto loss = strategy->step(batch, phases);
    phases.end_step();
    out.final_loss = loss.item<double>();
    listener_.on_step_activity();
    listener_.on_step_finished();
  }
  CpuMemoryCounter::DeviceScope host(CpuMemoryCounter::kHost);
  for (const auto& p : strategy->trained_parameters()) out.parameters.push_back(p.detach().to(torch::kCPU).clone());
  return out;
}

ParityCheck::Reference ParityCheck::train_or_say_why(const CaseSpec& spec, int steps) {
  if (builder_.parity_dtype_of(spec) != torch::kDouble) {
    return train_untimed(spec, steps);  // the dtype it is measured in: a failure is the case's
  }
  try {
    return train_untimed(spec, steps);
  } catch (const StopRequested&) {
    throw;
  } catch (const CaseFailure&) {
    throw;  // a dead peer, a timeout: the case's failure, not the model's dtype
  } catch (const std::logic_error&) {
    throw;  // ddpbench's own invariants: the strategy's failure, not the model's
  } catch (const std::exception& e) {  // the model's ops (c10::Error) or its TorchScript interpreter
    Reference failed;
    failed.failed = telling_line(e.what());
    return failed;
  }
}

ParityRecord ParityCheck::measure(const CaseSpec& spec) {
  const RunnerOptions& options = builder_.options();
  const ProcessGroupContext* group = builder_.group();
  const int steps = options.parity_steps;
  const bool compares = group == nullptr || group->rank() == 0;
  auto ref_it = references_.find(spec.workload);
  if (compares && ref_it == references_.end()) {
    CaseSpec reference = spec;
    reference.strategy = "single";
    reference.world_size = 1;
    ref_it = references_.emplace(spec.workload, train_or_say_why(reference, steps)).first;
  }
  // Trained even where single's pass failed: the other ranks train it, and its collectives need
  // every rank. The same model fails at the same op on every rank.
  const Reference result = train_or_say_why(spec, steps);

  ParityRecord p;
  p.steps = steps;
  p.dtype = builder_.parity_dtype_of(spec) == torch::kDouble ? "fp64" : to_string(options.precision);
  p.tolerance = options.parity_tolerance;
  p.final_loss = result.final_loss;
  const std::string failed = compares && !ref_it->second.failed.empty() ? ref_it->second.failed : result.failed;
  if (!failed.empty()) {
    p.checked = false;
    p.within_tolerance = false;
    p.note = "parity not checked: the float64 parity pass cannot train this model (" + failed +
             "), so the difference from single cannot be told; the measured run trains in " + to_string(options.precision);
    return p;
  }
  if (!compares) return p;  // ranks other than 0 only train
  p.reference_final_loss = ref_it->second.final_loss;
  const Difference difference = relative_difference(result.parameters, ref_it->second.parameters);
  p.max_rel_param_diff = difference.whole;
  p.within_tolerance = std::isfinite(p.max_rel_param_diff) && p.max_rel_param_diff <= p.tolerance;
  if (!p.within_tolerance) {
    const auto names = WorkloadRegistry::instance().get(spec.workload).make_model()->distinct_parameter_names();
    p.worst_parameters = worst_parameters(difference, p.tolerance, names);
  }
  p.compared_by_loss = StrategyRegistry::instance().get(spec.strategy).asynchronous;
  return p;
}

void judge_parity(CaseRecord& record, const ParityRecord& parity, bool sync_bn) {
  ParityRecord p = parity;
  const auto& workload = WorkloadRegistry::instance().get(record.spec.workload);
  const bool synced_bn = StrategyRegistry::instance().get(record.spec.strategy).multi_process && sync_bn;
  if (!p.checked) {
    // Nothing compared: neither ok nor failed; the note says why.
  } else if (p.compared_by_loss) {
    // Asynchronous updates land on parameters other workers are reading: no tolerance applies to
    // the parameters, but a loss that is no longer a number is a failed run.
    p.note = "asynchronous updates: compared with single by loss at equal samples seen (" +
             parity_number(p.final_loss) + " against " + parity_number(p.reference_final_loss) +
             " after " + std::to_string(p.steps) + " steps), not by parameters";
    if (!std::isfinite(p.final_loss)) {
      record.status = CaseStatus::Failed;
      record.reason = "parity: loss is not finite after " + std::to_string(p.steps) + " steps";
    }
  } else if (!p.within_tolerance && workload.has_batch_norm() && record.spec.world_size > 1 && !synced_bn) {
    p.note = "BatchNorm statistics are computed per device, so a difference from single is expected";
  } else if (!p.within_tolerance) {
    record.status = CaseStatus::Failed;
    record.reason = "parity: parameters differ from single by " + parity_number(p.max_rel_param_diff) +
                    " (relative) after " + std::to_string(p.steps) + " steps, tolerance " + parity_number(p.tolerance) +
                    (p.worst_parameters.empty() ? "" : "; most in " + p.worst_parameters);
  }
  record.parity = p;
}

}  // namespace ddpbench
