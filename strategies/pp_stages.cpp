#include "strategies/pp_stages.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/autograd.h>

#include <algorithm>
#include <chrono>
#include <unordered_set>

#include "base/errors.h"
#include "compat/torch_compat.h"

namespace ddpbench {
namespace {

// Elements each unit holds, the head's counted with unit 0 and the tail's with the last (where
// every cut puts them), each tensor once a stage.
std::vector<std::int64_t> stage_parameter_counts(WorkloadModel& model, const pipeline::StageSpans& spans) {
  const auto units = model.wrap_units();
  const auto head = model.chain_head_parameters(), tail = model.chain_tail_parameters();
  std::vector<std::int64_t> out;
  for (std::size_t s = 0; s < spans.size(); ++s) {
    std::unordered_set<const void*> seen;
    std::int64_t count = 0;
    const auto add = [&](const torch::Tensor& t) {
      if (seen.insert(t.unsafeGetTensorImpl()).second) count += t.numel();
    };
    for (std::size_t u = spans[s].first; u < spans[s].second; ++u)
      for (const auto& t : units.at(u).parameters) add(t);
    if (s == 0)
      for (const auto& t : head) add(t);
    if (s + 1 == spans.size())
      for (const auto& t : tail) add(t);
    out.push_back(count);
  }
  return out;
}

// Each unit's parameter elements, the head's with unit 0 and the tail's with the last: the
// costs --pp-balance params cuts by.
std::vector<double> unit_parameter_costs(WorkloadModel& model) {
  const std::size_t n = model.chain_length();
  std::vector<double> out;
  for (const auto count : stage_parameter_counts(model, pipeline::even_split(n, static_cast<int>(n)))) {
    out.push_back(static_cast<double>(count));
  }
  return out;
}

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) compat::cuda_synchronize(device.index());
}

}  // namespace

std::vector<double> profile_unit_seconds(WorkloadModel& model, const Workload& workload, std::int64_t rows,
                                         const c10::Device& device, Precision precision) {
  const std::size_t n = model.chain_length();
  // What profiling must leave as it found: running statistics, the generator dropout draws from.
  std::vector<torch::Tensor> buffers = model.distinct_buffers(), saved_buffers;
  for (const auto& b : buffers) saved_buffers.push_back(b.detach().clone());
  auto generator = at::detail::getDefaultCPUGenerator();
  const torch::Tensor generator_state = generator.get_state();

  const Dataset sample = workload.make_dataset(rows, /*seed=*/0x9e3779b9);
  // In the model's floating type, as the harness gives batches (float64 in the parity pass).
  c10::ScalarType dtype = torch::kFloat;
  for (const auto& p : model.parameters()) {
    if (p.is_floating_point()) {
      dtype = p.scalar_type();
      break;
    }
  }
  const auto placed = [&](const torch::Tensor& t) { return t.is_floating_point() ? t.to(device, dtype) : t.to(device); };
  const torch::Tensor inputs = placed(sample.inputs), targets = placed(sample.targets);
  // One pass to warm up, then at least 3 and until 0.2 s have been measured (at most 20): a unit's
  // time is the least of its passes, since a busy host only ever adds to it.
  constexpr int kWarmup = 1, kLeastMeasured = 3, kMostMeasured = 20;
  constexpr double kMeasuredSeconds = 0.2;
  double measured = 0;
  std::vector<std::vector<double>> seconds(n);
  using Clock = std::chrono::steady_clock;
  const auto since = [](Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); };
  for (int pass = 0; pass < kWarmup + kMostMeasured; ++pass) {
    if (pass >= kWarmup + kLeastMeasured && measured >= kMeasuredSeconds) break;
    std::vector<torch::Tensor> in(n), out(n);
    std::vector<double> took(n, 0.0);
    torch::Tensor loss, hidden = inputs;
    for (std::size_t u = 0; u < n; ++u) {
      // Each unit on its own graph, as a stage sees it: the input a leaf that takes a gradient.
      in[u] = u == 0 || !hidden.is_floating_point() ? hidden : hidden.detach().requires_grad_(true);
      synchronize(device);
      const auto start = Clock::now();
      {
        AutocastScope autocast(precision, device);
        out[u] = model.forward_range(in[u], u, u + 1);
        if (u + 1 == n) loss = workload.loss(out[u], targets);
      }
      synchronize(device);
      took[u] += since(start);
      hidden = out[u];
    }
    for (std::size_t k = n; k-- > 0;) {
      synchronize(device);
      const auto start = Clock::now();
      if (k + 1 == n) {
        loss.backward();
      } else if (in[k + 1].requires_grad()) {
        out[k].backward(in[k + 1].grad());
      }
      synchronize(device);
      took[k] += since(start);
    }
    if (pass >= kWarmup) {
      for (std::size_t u = 0; u < n; ++u) {
        seconds[u].push_back(took[u]);
        measured += took[u];
      }
    }
    for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
  }
  {
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < buffers.size(); ++i) buffers[i].copy_(saved_buffers[i]);
  }
  generator.set_state(generator_state);
  std::vector<double> least;
  for (const auto& s : seconds) least.push_back(*std::min_element(s.begin(), s.end()));
  return least;
}

StagePlan plan_stages(WorkloadModel& model, const Workload& workload, const PipelineOptions& options, int stages,
                      std::int64_t rows, const c10::Device& device, Precision precision, ProcessGroupContext& group) {
  const std::size_t n = model.chain_length();
  StagePlan plan;
  if (!options.split.empty()) {
    auto cut = pipeline::split_at(options.split, n, stages);
    if (!cut.why.empty()) throw CaseFailure(cut.why);
    plan.spans = std::move(cut.spans);
    plan.balance = "split";
  } else if (options.balance == pipeline::BalanceKind::Even) {
    plan.spans = pipeline::even_split(n, stages);
    plan.balance = "even";
  } else if (options.balance == pipeline::BalanceKind::Params) {
    plan.spans = pipeline::balanced_split(unit_parameter_costs(model), stages);
    plan.balance = "params";
  } else {
    // Rank 0 measures, alone (ranks timing at once on one host would slow each other); the others
    // add zeros, so every rank cuts from the same figures.
    auto figures = torch::zeros({static_cast<std::int64_t>(n)}, torch::TensorOptions().dtype(torch::kDouble).device(device));
    if (group.rank() == 0) {
      const auto measured = profile_unit_seconds(model, workload, rows, device, precision);
      figures.copy_(torch::tensor(measured, torch::kDouble));
    }
    group.allreduce(figures, "pp: the profiled time of each unit");
    const auto cpu = figures.cpu();
    const std::vector<double> unit_seconds(cpu.data_ptr<double>(), cpu.data_ptr<double>() + n);
    plan.spans = pipeline::balanced_split(unit_seconds, stages);
    plan.stage_profile_seconds = pipeline::stage_sums(unit_seconds, plan.spans);
    plan.unit_profile_seconds = unit_seconds;
    plan.balance = "time";
  }
  plan.stage_parameters = stage_parameter_counts(model, plan.spans);
  plan.unit_parameters = stage_parameter_counts(model, pipeline::even_split(n, static_cast<int>(n)));
  return plan;
}

}  // namespace ddpbench
