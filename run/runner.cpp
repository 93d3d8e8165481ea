#include "run/runner.h"

#include <ATen/Parallel.h>
#include <torch/utils.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <new>
#include <sstream>
#include <optional>
#include <thread>

#include <csignal>

#include <unistd.h>

#include "devices/counting_allocator.h"
#include "distributed/process_group.h"
#include "distributed/rank_launcher.h"
#include "records/record_codec.h"
#include "base/errors.h"
#include "base/stats.h"
#include "compat/torch_compat.h"
#include "base/watchdog.h"

namespace ddpbench {
namespace {

std::atomic<bool> g_stop_requested{false};

// Raised at a step boundary after request_stop(); ends the run, keeping what was measured.
using StopRequested = RunInterrupted;

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

std::string as_string(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }
std::vector<uint8_t> as_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

// Fault injection for the tests: DDPBENCH_FAULT_HANG=<case name> makes the first measured step of
// that case hang, so the --timeout watchdog can be tested end to end. Unset, it costs one getenv
// per repetition.
bool should_hang(const std::string& case_name) {
  const char* target = std::getenv("DDPBENCH_FAULT_HANG");
  return target != nullptr && case_name == target;
}

// DDPBENCH_FAULT_RANK=<rank>:kill or <rank>:hang, optionally @<repetition>: that rank of a
// multi-process case SIGKILLs itself, or stops making progress, at the first measured step of every
// repetition (or of that one), so the launcher's fault handling can be tested end to end with real
// processes.
std::string rank_fault(const ProcessGroupContext* group, int repetition) {
  const char* spec = std::getenv("DDPBENCH_FAULT_RANK");
  if (group == nullptr || spec == nullptr) return {};
  const std::string s = spec;
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.substr(0, colon) != std::to_string(group->rank())) return {};
  std::string fault = s.substr(colon + 1);
  const auto at = fault.find('@');
  if (at == std::string::npos) return fault;
  return fault.substr(at + 1) == std::to_string(repetition) ? fault.substr(0, at) : std::string();
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// LibTorch's own words for it: CUDA's caching allocator says "CUDA out of memory", the CPU
// allocator "DefaultCPUAllocator: can't allocate memory"; a rank or worker that the kernel's OOM
// killer ended is named so by child_process's exit_text.
bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const std::bad_alloc*>(&e) != nullptr) return true;
  const std::string what = e.what();
  for (const char* words : {"out of memory", "Out of memory", "can't allocate memory", "out-of-memory killer"}) {
    if (what.find(words) != std::string::npos) return true;
  }
  return false;
}

// Cases that were runnable but never measured: a run that ended early says so of each of them
// rather than leaving them "ok" with nothing behind it.
void mark_not_reached(std::vector<CaseRecord>& cases, const std::string& why) {
  for (auto& c : cases) {
    if ((c.status == CaseStatus::Ok || c.status == CaseStatus::NotRun) && c.repetitions.empty()) {
      c.status = CaseStatus::NotRun;
      c.reason = "not run: " + why;
    }
  }
}

// First line of an exception message: LibTorch appends C++ backtraces that do not belong in a table.
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

void synchronize(const DeviceSet& devices, int used) {
  if (!devices.is_cuda()) return;
  for (int d = 0; d < used; ++d) compat::cuda_synchronize(d);
}

// Norm-wise relative error of the whole parameter vector: max |p - p_ref| over every element divided
// by max |p_ref| over every element. Per-tensor ratios are no measure: a tensor initialised to zero
// (a bias) has a scale of one learning rate after a step, so any rounding looks like a large error.
double max_relative_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) throw CaseFailure("parity: parameter count differs from single's");
  double worst_diff = 0, scale = 1e-12;
  for (size_t i = 0; i < a.size(); ++i) {
    const auto ref = b[i].to(torch::kCPU, torch::kFloat64);
    const auto got = a[i].to(torch::kCPU, torch::kFloat64);
    if (got.sizes() != ref.sizes()) throw CaseFailure("parity: parameter shapes differ from single's");
    scale = std::max(scale, ref.abs().max().item<double>());
    worst_diff = std::max(worst_diff, (got - ref).abs().max().item<double>());
  }
  return worst_diff / scale;
}

}  // namespace

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
    own_work.push_back(r.mean_step_seconds - r.phase_seconds[static_cast<int>(Phase::CommExposed)]);
  }
  const double median = stats::median(own_work);
  if (median <= 0) return std::nullopt;
  return *std::max_element(own_work.begin(), own_work.end()) / median;
}

std::optional<double> bus_bandwidth(const CommSummary& comm) {
  if (comm.allreduce_seconds_per_step <= 0 || comm.world_size < 2) return std::nullopt;
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

std::string RankTask::encode() const {
  return (kind == Kind::Parity ? "parity " : "repetition " + std::to_string(repetition) + " ") + case_name +
         (trace ? " trace" : "");
}

RankTask RankTask::decode(const std::string& text) {
  RankTask task;
  std::istringstream in(text);
  std::string kind;
  in >> kind;
  if (kind == "repetition") {
    task.kind = Kind::Repetition;
    in >> task.repetition;
  } else if (kind != "parity") {
    throw UsageError("DDPBENCH_RANK_TASK=" + text + ": expected 'parity CASE' or 'repetition N CASE'");
  }
  in >> task.case_name;
  const bool named = static_cast<bool>(in) && !task.case_name.empty();
  std::string flag;
  if (named && in >> flag) task.trace = flag == "trace";
  if (!named || (!flag.empty() && !task.trace)) {
    throw UsageError("DDPBENCH_RANK_TASK=" + text + ": expected 'parity CASE' or 'repetition N CASE [trace]'");
  }
  return task;
}

void Runner::request_stop() { g_stop_requested.store(true); }
bool Runner::stop_requested() { return g_stop_requested.load(); }

Runner::Runner(RunnerOptions options, DeviceSet devices, RunContext context)
    : options_(std::move(options)), devices_(devices) {
  configure_workloads({devices_.is_cuda(), options_.sequence_length});
  record_.context = std::move(context);
  auto& s = record_.settings;
  s.steps = options_.steps;
  s.warmup = options_.warmup;
  s.repetitions = options_.repetitions;
  s.seed = options_.seed;
  s.parity_steps = options_.parity_steps;
  s.parity_tolerance = options_.parity_tolerance;
  s.precision = options_.precision;
  s.max_cv = options_.max_cv;
  s.slow_by = options_.slow_by;
  s.target_precision = options_.target_precision;
  s.min_time_seconds = options_.min_time_seconds;
  s.max_time_seconds = options_.max_time_seconds;
  s.loader_workers = options_.loader.workers;
  s.pin_memory = options_.loader.pin_memory;
  s.device_kind = devices_.kind();
  s.world_size = devices_.size();
  s.threads_per_device = devices_.threads_per_device();
  s.timeout_seconds = options_.timeout_seconds;
  for (const auto& w : options_.workloads) s.workload_descriptions[w] = WorkloadRegistry::instance().get(w).description();
}

std::int64_t Runner::global_batch_for(const Workload& workload) const {
  return options_.global_batch.value_or(workload.default_global_batch());
}

void Runner::validate() const {
  const std::string dtype_reason =
      precision_unsupported_reason(options_.precision, devices_.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
  if (!dtype_reason.empty()) throw UsageError("--dtype: " + dtype_reason);
  for (const auto& w : options_.workloads) {
    const auto& workload = WorkloadRegistry::instance().get(w);
    const std::int64_t batch = global_batch_for(workload);
    const std::int64_t dataset = options_.dataset_size.value_or(32 * batch);
    for (const auto& s : options_.strategies) {
      const auto& info = StrategyRegistry::instance().get(s);
      if (info.uses_all_devices && batch < devices_.size()) {
        throw UsageError("--batch: global batch " + std::to_string(batch) + " is smaller than the world size " +
                         std::to_string(devices_.size()) + " (" + s + " on " + w + " needs a sample per device)");
      }
    }
    if (dataset < batch) {
      throw UsageError("--dataset-size: " + std::to_string(dataset) + " samples cannot fill a global batch of " +
                       std::to_string(batch) + " (" + w + ")");
    }
  }
}

std::optional<PeakFlops> Runner::case_peak(const StrategyInfo& info, const CaseSpec& spec) const {
  std::optional<PeakFlops> one;
  if (options_.peak_flops) {
    one = PeakFlops{*options_.peak_flops, "--peak-tflops"};
  } else if (devices_.is_cuda()) {
    one = datasheet_peak_flops(compat::cuda_device_name(devices_.device(0).index()), options_.precision);
  }
  if (!one) return std::nullopt;
  const int used = devices_.is_cuda() && info.one_cuda_device ? 1 : spec.world_size;
  return PeakFlops{one->flops_per_second * used, one->source + (used > 1 ? " x " + std::to_string(used) + " devices" : "")};
}

std::vector<CaseRecord> Runner::plan_cases() const {
  std::vector<CaseRecord> cases;
  for (const auto& w : options_.workloads) {
    const auto& workload = WorkloadRegistry::instance().get(w);
    const auto facts = workload.facts();
    for (const auto& s : options_.strategies) {
      const auto& info = StrategyRegistry::instance().get(s);
      CaseRecord c;
      c.spec.workload = w;
      c.spec.strategy = s;
      c.spec.world_size = info.uses_all_devices ? devices_.size() : 1;
      if (group_ && !info.multi_process) {
        c.status = CaseStatus::Skipped;
        c.reason = "this process is rank " + std::to_string(group_->rank()) + " of " + std::to_string(group_->size()) +
                   " started by a launcher: only multi-process strategies run across ranks";
      }
      c.spec.global_batch = global_batch_for(workload);
      c.device_kind = devices_.kind();
      c.threads_per_device = devices_.threads_per_device();
      c.facts = facts;
      c.peak = case_peak(info, c.spec);
      if (info.uses_all_devices && c.spec.world_size == 1) {
        c.note = "world size 1: " + s + " degenerates to one device (use --world-size 2 or more to compare)";
      }
      if (info.multi_process && !group_ && !launcher_) {
        c.status = CaseStatus::Skipped;
        c.reason = "needs rank processes: run it through the ddpbench executable or a launcher (torchrun, srun)";
      }
      if (c.status != CaseStatus::Ok) {
      } else if (auto reason = info.create()->unsupported_reason(c.spec, devices_, options_.strategy)) {
        c.status = CaseStatus::Skipped;
        c.reason = *reason;
      }
      cases.push_back(std::move(c));
    }
  }
  return cases;
}

const Dataset& Runner::dataset_for(const Workload& workload, std::int64_t global_batch) {
  auto it = datasets_.find(workload.name());
  if (it == datasets_.end()) {
    const std::int64_t size = options_.dataset_size.value_or(32 * global_batch);
    CpuMemoryCounter::DeviceScope host(CpuMemoryCounter::kHost);
    it = datasets_.emplace(workload.name(), workload.make_dataset(size, options_.seed)).first;
  }
  return it->second;
}

std::unique_ptr<Strategy> Runner::start_strategy(const CaseSpec& spec, OptimizerFactory optimizer, int steps,
                                                 bool parity_run) {
  const auto& workload = WorkloadRegistry::instance().get(spec.workload);
  torch::manual_seed(options_.seed);  // the same initial weights for every strategy and repetition
  const auto& info = StrategyRegistry::instance().get(spec.strategy);
  auto strategy = info.create();
  StrategySetup setup{workload, spec, devices_, workload.make_model(), std::move(optimizer)};
  if (parity_run) {
    const auto dtype = parity_dtype_of(spec);
    if (dtype != torch::kFloat) set_floating_dtype(*setup.model, dtype);
  }
  setup.options = options_.strategy;
  setup.steps_per_run = steps;
  setup.process_group = info.multi_process ? group_ : nullptr;
  setup.parity_run = parity_run;
  setup.timeout_seconds = options_.timeout_seconds;
  setup.precision = options_.precision;
  setup.stop_requested = [] { return stop_requested(); };
  strategy->setup(setup);
  return strategy;
}

bool Runner::delegated(const CaseSpec& spec) const {
  return launcher_ != nullptr && group_ == nullptr && StrategyRegistry::instance().get(spec.strategy).multi_process;
}

RankTaskOutput Runner::run_on_ranks(const RankTask& task) {
  return launcher_->run(
      task.encode(), [this](std::int64_t) { progress(); }, [] { return stop_requested(); });
}

BatchLoader Runner::make_loader(const Dataset& dataset, const CaseSpec& spec, const Strategy& strategy,
                                bool pin_memory) const {
  LoaderOptions loader = options_.loader;
  loader.pin_memory = loader.pin_memory || pin_memory;
  return BatchLoader(dataset, EpochSampler(dataset.size(), spec.global_batch, options_.seed, strategy.data_shard()),
                     loader);
}

DataPath Runner::data_path_for(const Strategy& strategy) const {
  if (!strategy.batch_device()) return DataPath::Host;
  if (options_.data_path == DataPath::Auto) return devices_.is_cuda() ? DataPath::Prefetch : DataPath::Host;
  return options_.data_path;
}

c10::ScalarType Runner::parity_dtype_of(const CaseSpec& spec) const {
  if (StrategyRegistry::instance().get(spec.strategy).asynchronous) return torch::kFloat;
  return parity_dtype(options_.precision);
}

Runner::Reference Runner::train_untimed(const CaseSpec& spec, int steps) {
  const auto& workload = WorkloadRegistry::instance().get(spec.workload);
  const auto& dataset = dataset_for(workload, spec.global_batch);
  auto strategy = start_strategy(spec, parity_optimizer(workload), steps, /*parity_run=*/true);
  BatchLoader loader = make_loader(dataset, spec, *strategy);
  const auto dtype = parity_dtype_of(spec);
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
    progress();
    count_step();
  }
  CpuMemoryCounter::DeviceScope host(CpuMemoryCounter::kHost);
  for (const auto& p : strategy->trained_parameters()) out.parameters.push_back(p.detach().to(torch::kCPU).clone());
  return out;
}

void Runner::check_parity(CaseRecord& record) {
  const int steps = options_.parity_steps;
  if (steps == 0) return;
  for (auto* sink : sinks_) sink->on_progress(record.spec.name(), "parity check", 0, steps);
  const ParityRecord parity = delegated(record.spec)
                                  ? codec::decode_parity(run_on_ranks({RankTask::Kind::Parity, record.spec.name(), 0}).result)
                                  : measure_parity(record.spec);
  judge_parity(record, parity);
  if (group_ != nullptr) {
    // Only rank 0 compares with single: every rank must agree on whether the case goes on.
    const std::string key = "parity/" + record.spec.name();
    if (group_->rank() == 0) {
      group_->store().set(key, as_bytes(record.status == CaseStatus::Ok ? std::string() : record.reason));
    } else {
      group_->store().wait({key});
      const std::string reason = as_string(group_->store().get(key));
      if (!reason.empty()) {
        record.status = CaseStatus::Failed;
        record.reason = reason;
      }
    }
  }
}

ParityRecord Runner::measure_parity(const CaseSpec& spec) {
  const int steps = options_.parity_steps;
  const bool compares = group_ == nullptr || group_->rank() == 0;
  auto ref_it = references_.find(spec.workload);
  if (compares && ref_it == references_.end()) {
    CaseSpec reference = spec;
    reference.strategy = "single";
    reference.world_size = 1;
    ref_it = references_.emplace(spec.workload, train_untimed(reference, steps)).first;
  }
  const Reference result = train_untimed(spec, steps);

  ParityRecord p;
  p.steps = steps;
  p.dtype = parity_dtype_of(spec) == torch::kDouble ? "fp64" : to_string(options_.precision);
  p.tolerance = options_.parity_tolerance;
  p.final_loss = result.final_loss;
  if (!compares) return p;  // ranks other than 0 only train
  p.reference_final_loss = ref_it->second.final_loss;
  p.max_rel_param_diff = max_relative_difference(result.parameters, ref_it->second.parameters);
  p.within_tolerance = std::isfinite(p.max_rel_param_diff) && p.max_rel_param_diff <= p.tolerance;
  p.compared_by_loss = StrategyRegistry::instance().get(spec.strategy).asynchronous;
  return p;
}

void Runner::judge_parity(CaseRecord& record, const ParityRecord& parity) const {
  ParityRecord p = parity;
  const auto& workload = WorkloadRegistry::instance().get(record.spec.workload);
  const bool synced_bn = StrategyRegistry::instance().get(record.spec.strategy).multi_process && options_.strategy.ddp.sync_bn;
  if (p.compared_by_loss) {
    // Asynchronous updates land on parameters other workers are reading: no tolerance applies to
    // the parameters, but a loss that is no longer a number is a failed run.
    p.note = "asynchronous updates: compared with single by loss at equal samples seen (" +
             std::to_string(p.final_loss) + " against " + std::to_string(p.reference_final_loss) +
             " after " + std::to_string(p.steps) + " steps), not by parameters";
    if (!std::isfinite(p.final_loss)) {
      record.status = CaseStatus::Failed;
      record.reason = "parity: loss is not finite after " + std::to_string(p.steps) + " steps";
    }
  } else if (!p.within_tolerance && workload.has_batch_norm() && record.spec.world_size > 1 && !synced_bn) {
    p.note = "BatchNorm statistics are computed per device, so a difference from single is expected";
  } else if (!p.within_tolerance) {
    record.status = CaseStatus::Failed;
    record.reason = "parity: parameters differ from single by " + std::to_string(p.max_rel_param_diff) +
                    " (relative) after " + std::to_string(p.steps) + " steps, tolerance " + std::to_string(p.tolerance);
  }
  record.parity = p;
}

RepetitionRecord Runner::run_repetition(const CaseRecord& record, int index) {
  if (delegated(record.spec)) {
    const RankTaskOutput out =
        run_on_ranks({RankTask::Kind::Repetition, record.spec.name(), index, /*trace=*/options_.trace != nullptr});
    if (options_.trace) {
      // Each rank's measured steps, in its own file, on the same timeline as this process's.
      options_.trace->set_context(record.spec.name(), index);
      for (int r = 0; r < static_cast<int>(out.traces.size()); ++r) {
        options_.trace->merge(out.traces[static_cast<size_t>(r)], r,
                              record.spec.strategy + " rank " + std::to_string(r) + " process");
      }
    }
    return codec::decode_repetition(out.result);
  }
  RepetitionRecord rep = measure_repetition(record, index);
  if (group_ != nullptr) gather_ranks(record.spec, rep);
  return rep;
}

void Runner::gather_ranks(const CaseSpec& spec, RepetitionRecord& rep) {
  RankRecord mine;
  mine.rank = group_->rank();
  mine.host = host_name();
  mine.mean_step_seconds = rep.mean_step_seconds();
  mine.phase_seconds = rep.phase_seconds;
  mine.cpu_seconds = rep.cpu_seconds;
  mine.peak_rss_bytes = rep.peak_rss_bytes;
  mine.memory = rep.memory;
  for (auto& m : mine.memory) m.device = group_->rank();
  const std::string prefix = "gather/" + spec.name() + "/" + std::to_string(rep.index) + "/";
  if (group_->rank() != 0) {
    group_->store().set(prefix + std::to_string(mine.rank), as_bytes(codec::encode(mine)));
    return;
  }
  rep.ranks = {mine};
  rep.memory.clear();
  for (const auto& m : mine.memory) rep.memory.push_back(m);
  for (int r = 1; r < group_->size(); ++r) {
    const std::string key = prefix + std::to_string(r);
    group_->store().wait({key});
    rep.ranks.push_back(codec::decode_rank(as_string(group_->store().get(key))));
    for (const auto& m : rep.ranks.back().memory) rep.memory.push_back(m);
  }
}

std::string Runner::run_rank_task(const RankTask& task) {
  CpuMemoryCounter::install();
  at::set_num_threads(devices_.threads_per_device());
  record_.cases = plan_cases();
  report_steps_ = group_ != nullptr && group_->rank() == 0;
  for (auto& c : record_.cases) {
    if (c.spec.name() != task.case_name) continue;
    if (c.status != CaseStatus::Ok) throw CaseFailure(c.reason);
    if (task.kind == RankTask::Kind::Parity) {
      const ParityRecord parity = measure_parity(c.spec);
      return group_->rank() == 0 ? codec::encode(parity) : std::string();
    }
    // A traced repetition: this rank's events go to the launcher through the store.
    std::optional<TraceRecorder> trace;
    struct Unset {  // however the repetition ends, the options never point at the gone recorder
      TraceRecorder*& slot;
      ~Unset() { slot = nullptr; }
    } unset{options_.trace};
    if (task.trace) {
      trace.emplace(group_->rank(), group_->size());
      options_.trace = &*trace;
    }
    RepetitionRecord rep = run_repetition(c, task.repetition);
    if (trace) {
      const std::string events = trace->encode();
      group_->store().set(task_keys::trace(group_->rank()), std::vector<uint8_t>(events.begin(), events.end()));
    }
    return group_->rank() == 0 ? codec::encode(rep) : std::string();
  }
  throw UsageError("DDPBENCH_RANK_TASK: no case named " + task.case_name + " in this run");
}

RepetitionRecord Runner::measure_repetition(const CaseRecord& record, int index) {
  const auto& spec = record.spec;
  const auto& workload = WorkloadRegistry::instance().get(spec.workload);
  const auto& dataset = dataset_for(workload, spec.global_batch);

  MemoryProbe memory = group_ ? MemoryProbe(devices_, 1, devices_.is_cuda() ? group_->local_rank() : 0)
                              : MemoryProbe(devices_, spec.world_size);
  memory.begin_case();  // before the strategy: its peak holds its own bytes, not an earlier case's
  auto strategy = start_strategy(spec, training_optimizer(workload), options_.warmup + options_.steps, false);
  const DataPath data_path = data_path_for(*strategy);
  // --data-path device: this repetition's copy of the dataset on the strategy's device (on a CPU
  // virtual device, a copy charged to it), part of the case's peak like the model.
  std::optional<Dataset> on_device;
  if (data_path == DataPath::Device) {
    const c10::Device device = *strategy->batch_device();
    CpuMemoryCounter::DeviceScope charge_to(0);  // the batch device is this process's device 0
    on_device = Dataset{device.is_cuda() ? dataset.inputs.to(device) : dataset.inputs.clone(),
                        device.is_cuda() ? dataset.targets.to(device) : dataset.targets.clone()};
  }
  BatchLoader loader = make_loader(on_device ? *on_device : dataset, spec, *strategy,
                                   /*pin_memory=*/data_path == DataPath::Prefetch && devices_.is_cuda());
  std::optional<BatchPrefetcher> prefetcher;
  if (data_path == DataPath::Prefetch) prefetcher.emplace(loader, *strategy->batch_device(), 0);
  PhaseRecorder phases;
  // On CUDA the phases are the GPU's time (events on the step thread's stream of this process's
  // device); the steps themselves stay host-timed, after synchronizing.
  if (devices_.is_cuda()) phases.use_cuda_events(group_ ? group_->local_rank() : 0);

  RepetitionRecord rep;
  rep.index = index;
  rep.data_path = to_string(data_path);
  rep.step_seconds.reserve(static_cast<size_t>(options_.steps));
  const std::string name = spec.name();
  torch::Tensor loss;

  const std::string fault = rank_fault(group_, index);
  const bool hang = should_hang(name) || fault == "hang";
  auto one_step = [&] {
    if (stop_requested()) throw StopRequested();
    const auto began = std::chrono::steady_clock::now();
    progress();
    phases.begin_step();
    Batch batch;
    {
      auto scope = phases.scope(Phase::Data);
      // Batches live in host memory, except those gathered from a dataset on the device.
      CpuMemoryCounter::DeviceScope host(on_device ? 0 : CpuMemoryCounter::kHost);
      batch = prefetcher ? prefetcher->next() : loader.next();
    }
    loss = strategy->step(batch, phases);
    if (group_ == nullptr) {
      synchronize(devices_, spec.world_size);
    } else if (devices_.is_cuda()) {
      compat::cuda_synchronize(group_->local_rank());  // a rank waits for its own device only
    }
    if (options_.slow_by > 0) {  // injected slowdown (--slow-by): inside the step, in its residual
      std::this_thread::sleep_for((std::chrono::steady_clock::now() - began) * options_.slow_by);
    }
    phases.end_step();
  };

  for (int i = 0; i < options_.warmup; ++i) {
    one_step();
    count_step();
    for (auto* sink : sinks_) sink->on_progress(name, "warm-up", i + 1, options_.warmup);
  }
  memory.reset();
  strategy->reset_measured_stats();
  if (options_.trace) {
    options_.trace->set_context(name, index);
    phases.set_trace(options_.trace);  // measured steps only: warm-up is not part of the picture
  }
  // "rep 2/5", or sampling adaptively "rep 2 (to +-3%)": how many is not known ahead.
  char target[32];
  std::snprintf(target, sizeof(target), " (to +-%g%%)", options_.target_precision * 100);
  const std::string repetition_label =
      "rep " + std::to_string(index + 1) +
      (options_.target_precision > 0 ? std::string(target) : "/" + std::to_string(options_.repetitions));
  const double cpu_start = process_cpu_seconds();
  for (int i = 0; i < options_.steps; ++i) {
    phases.set_step(options_.warmup + i);
    const auto start = std::chrono::steady_clock::now();
    while (hang) std::this_thread::sleep_for(std::chrono::seconds(1));  // injected fault
    if (fault == "kill") raise(SIGKILL);                                 // injected fault
    one_step();
    const auto stop = std::chrono::steady_clock::now();
    count_step();
    rep.step_seconds.push_back(std::chrono::duration<double>(stop - start).count());
    for (int p = 0; p < kPhaseCount; ++p) rep.phase_seconds[p] += phases.step_seconds()[p];
    rep.step_losses.push_back(loss.item<double>());
    for (auto* sink : sinks_) {
      sink->on_progress(name, repetition_label, i + 1, options_.steps);
    }
  }
  rep.cpu_seconds = process_cpu_seconds() - cpu_start;
  rep.first_loss = rep.step_losses.front();
  rep.final_loss = rep.step_losses.back();
  for (auto& p : rep.phase_seconds) p /= static_cast<double>(options_.steps);
  rep.memory = memory.read();
  rep.peak_rss_bytes = MemoryProbe::process_peak_rss_bytes();
  rep.comm = strategy->comm_summary();
  rep.async = strategy->async_summary();
  if (rep.async && !rep.async->worker_peak_rss_bytes.empty()) {
    // The workers allocate in their own processes, out of this one's counters' sight: their peak
    // RSS (in async) is the measure, and the per-device figures are unknown rather than zero.
    for (auto& m : rep.memory) m.peak_allocated_bytes.reset();
  }
  if (!std::isfinite(rep.final_loss)) throw CaseFailure("loss is not finite after " + std::to_string(options_.steps) + " steps");
  return rep;
}

std::optional<LossVsSingle> Runner::loss_against_single(const CaseRecord& c) const {
  auto median_final_loss = [](const CaseRecord& r) {
    std::vector<double> losses;
    for (const auto& rep : r.repetitions) losses.push_back(rep.final_loss);
    return stats::median(losses);
  };
  for (const auto& base : record_.cases) {
    if (base.spec.workload != c.spec.workload || base.spec.strategy != "single" || !base.measured()) continue;
    // Every repetition restarts from the same weights and batches, so the last measured step of
    // each has seen the same samples under either strategy.
    LossVsSingle l;
    l.samples_seen = static_cast<std::int64_t>(options_.warmup + options_.steps) * c.spec.global_batch;
    l.loss = median_final_loss(c);
    l.reference_loss = median_final_loss(base);
    return l;
  }
  return std::nullopt;
}

bool Runner::wants_repetition(int round) const {
  if (options_.target_precision <= 0) return round < options_.repetitions;
  return round < kMaxAdaptiveRepetitions;
}

bool Runner::settle(CaseRecord& c) const {
  double measured_seconds = 0;
  for (const auto& r : c.repetitions) {
    for (double t : r.step_seconds) measured_seconds += t;
  }
  c.achieved_precision = stats::relative_ci95_half_width(c.repetition_lower_quartiles());
  if (options_.target_precision <= 0) return false;  // a fixed count: wants_repetition decides
  const bool enough = static_cast<int>(c.repetitions.size()) >= options_.repetitions &&
                      measured_seconds >= options_.min_time_seconds;
  if (enough && c.achieved_precision && *c.achieved_precision <= options_.target_precision) {
    c.unresolved = false;
    return true;
  }
  // Out of time, or of repetitions: stopped short of the target, and says so.
  c.unresolved = c.seconds_spent >= options_.max_time_seconds ||
                 static_cast<int>(c.repetitions.size()) >= kMaxAdaptiveRepetitions;
  return c.unresolved;
}

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

void Runner::finish_case_error(CaseRecord& record, const std::exception& error) {
  record.status = is_out_of_memory(error) ? CaseStatus::Oom : CaseStatus::Failed;
  record.reason = first_line(error.what());
}

void Runner::notify_update() {
  for (auto* sink : sinks_) sink->on_update(record_);
}

void Runner::progress() {
  if (watchdog_) watchdog_->kick();
}

void Runner::count_step() {
  progress();
  if (report_steps_) group_->store().add(task_keys::kSteps, 1);
}

void Runner::handle_hang() {
  std::ostringstream seconds;
  seconds << options_.timeout_seconds;
  const std::string reason = "timed out: no step finished within " + seconds.str() + " s (--timeout)";
  // The main thread is stuck inside a step and holds no lock; if it does hold it, it is not stuck
  // in a step, and the last complete JSON stays as it is.
  std::unique_lock<std::timed_mutex> lock(record_mutex_, std::chrono::seconds(2));
  if (lock.owns_lock()) {
    const int current = current_case_.load();
    if (current >= 0) {
      auto& c = record_.cases[static_cast<size_t>(current)];
      c.status = CaseStatus::Failed;
      c.reason = reason;
    }
    record_.interruption = "stopped by the --timeout watchdog; measured repetitions are kept";
    mark_not_reached(record_.cases, "the --timeout watchdog stopped the run first");
    record_.complete = false;
    notify_update();
    for (auto* sink : sinks_) sink->on_finish(record_);
  }
  if (on_hang_) on_hang_(record_);
}

RunRecord Runner::run() {
  CpuMemoryCounter::install();
  at::set_num_threads(devices_.threads_per_device());
  {
    std::lock_guard<std::timed_mutex> lock(record_mutex_);
    record_.cases = plan_cases();
    record_.complete = false;
    // What a live file says of the cases still to come; each becomes ok when its turn comes.
    mark_not_reached(record_.cases, "the run ended before this case's turn");
    notify_update();
  }
  std::optional<StepWatchdog> watchdog;
  if (on_hang_) {
    watchdog.emplace(std::chrono::duration<double>(options_.timeout_seconds), [this] { handle_hang(); });
    watchdog_ = &*watchdog;
    watchdog->arm();
  }

  try {
    for (size_t i = 0; i < record_.cases.size(); ++i) {
      if (record_.cases[i].status != CaseStatus::NotRun) continue;
      current_case_ = static_cast<int>(i);
      progress();
      CaseRecord updated = record_.cases[i];  // worked on outside the lock
      updated.status = CaseStatus::Ok;
      updated.reason.clear();
      try {
        check_parity(updated);
      } catch (const StopRequested&) {
        throw;
      } catch (const std::exception& e) {
        finish_case_error(updated, e);
      }
      std::lock_guard<std::timed_mutex> lock(record_mutex_);
      record_.cases[i] = updated;
      notify_update();
    }
    // Rounds of one repetition per case still going, interleaved so that the machine's drift
    // falls on every case alike.
    std::vector<bool> settled(record_.cases.size(), false);
    for (int rep = 0;; ++rep) {
      bool ran = false;
      for (size_t i = 0; i < record_.cases.size(); ++i) {
        if (record_.cases[i].status != CaseStatus::Ok || settled[i] || !wants_repetition(rep)) continue;
        ran = true;
        current_case_ = static_cast<int>(i);
        progress();
        std::optional<RepetitionRecord> measured;
        CaseRecord failed = record_.cases[i];
        bool ok = true;
        const auto started = std::chrono::steady_clock::now();
        try {
          measured = run_repetition(record_.cases[i], rep);
        } catch (const StopRequested&) {
          throw;
        } catch (const std::exception& e) {
          finish_case_error(failed, e);
          ok = false;
        }
        std::lock_guard<std::timed_mutex> lock(record_mutex_);
        auto& c = record_.cases[i];
        c.seconds_spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        if (ok) {
          c.repetitions.push_back(std::move(*measured));
          settled[i] = settle(c);
        } else {
          c.status = failed.status;
          c.reason = failed.reason;
        }
        notify_update();
      }
      if (!ran) break;
    }
  } catch (const StopRequested&) {
    record_.interruption = "interrupted by a signal; measured repetitions are kept";
  }
  if (!record_.interruption.empty()) mark_not_reached(record_.cases, "the run was interrupted first");
  current_case_ = -1;
  if (watchdog) watchdog->disarm();
  watchdog_ = nullptr;
  std::lock_guard<std::timed_mutex> lock(record_mutex_);

  // scaling efficiency = throughput(N) / (N x throughput(single)), where single ran on this workload.
  for (auto& c : record_.cases) {
    if (c.repetitions.empty()) continue;
    for (const auto& base : record_.cases) {
      if (base.spec.workload == c.spec.workload && base.spec.strategy == "single" && base.measured()) {
        c.scaling_efficiency = c.median_items_per_second() / (c.spec.world_size * base.median_items_per_second());
      }
    }
    if (StrategyRegistry::instance().get(c.spec.strategy).asynchronous) c.loss_vs_single = loss_against_single(c);
    c.noisy = c.repetitions.size() >= 2 && stats::cv(c.repetition_means()) > options_.max_cv;
    for (int p = 0; p < kPhaseCount; ++p) {
      bool used = false;
      for (const auto& r : c.repetitions) used = used || r.phase_seconds[p] > 0;
      if (used) c.phases_used.push_back(static_cast<Phase>(p));
    }
  }
  set_noise_floor(record_);
  record_.complete = record_.interruption.empty();
  notify_update();
  for (auto* sink : sinks_) sink->on_finish(record_);
  return record_;
}

}  // namespace ddpbench
