#include "run/repetition.h"

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>

#include "base/errors.h"
#include "compat/torch_compat.h"
#include "devices/counting_allocator.h"
#include "devices/memory_probe.h"
#include "distributed/process_group.h"
#include "run/activation_meter.h"
#include "run/fault_injection.h"
#include "run/stop_request.h"
#include "timing/phase_recorder.h"

namespace ddpbench {
namespace {

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void synchronize(const DeviceSet& devices, int used) {
  if (!devices.is_cuda()) return;
  for (int d = 0; d < used; ++d) compat::cuda_synchronize(d);
}

}  // namespace

RepetitionRecord measure_repetition(CaseBuilder& builder, StepListener& listener, const CaseRecord& record,
                                    int index) {
  const RunnerOptions& options = builder.options();
  const DeviceSet& devices = builder.devices();
  ProcessGroupContext* const group = builder.group();
  const auto& spec = record.spec;
  const auto& workload = WorkloadRegistry::instance().get(spec.workload);
  const auto& dataset = builder.dataset_for(workload, spec.global_batch);

  MemoryProbe memory = group ? MemoryProbe(devices, 1, devices.is_cuda() ? group->local_rank() : 0)
                             : MemoryProbe(devices, spec.world_size);
  memory.begin_case();  // before the strategy: its peak holds its own bytes, not an earlier case's
  auto strategy = builder.start_strategy(spec, training_optimizer(workload), options.warmup + options.steps, false);
  const DataPath data_path = builder.data_path_for(*strategy);
  // --data-path device: this repetition's copy of the dataset on the strategy's device (on a CPU
  // virtual device, a copy charged to it), part of the case's peak like the model.
  std::optional<Dataset> on_device;
  if (data_path == DataPath::Device) {
    const c10::Device device = *strategy->batch_device();
    CpuMemoryCounter::DeviceScope charge_to(0);  // the batch device is this process's device 0
    on_device = Dataset{device.is_cuda() ? dataset.inputs.to(device) : dataset.inputs.clone(),
                        device.is_cuda() ? dataset.targets.to(device) : dataset.targets.clone()};
  }
  BatchLoader loader = builder.make_loader(on_device ? *on_device : dataset, spec, *strategy,
                                           /*pin_memory=*/data_path == DataPath::Prefetch && devices.is_cuda());
  std::optional<BatchPrefetcher> prefetcher;
  if (data_path == DataPath::Prefetch) prefetcher.emplace(loader, *strategy->batch_device(), 0);
  PhaseRecorder phases;
  // On CUDA the phases are the GPU's time (events on the step thread's stream of this process's
  // device); the steps themselves stay host-timed, after synchronizing.
  if (devices.is_cuda()) phases.use_cuda_events(group ? group->local_rank() : 0);

  RepetitionRecord rep;
  rep.index = index;
  rep.data_path = to_string(data_path);
  rep.step_seconds.reserve(static_cast<size_t>(options.steps));
  const std::string name = spec.name();
  torch::Tensor loss;

  const std::string fault = rank_fault(group, index);
  const bool case_hangs = should_hang(name);
  const bool hang = case_hangs || fault == "hang";
  auto fetch = [&] {
    // Batches live in host memory, except those gathered from a dataset on the device.
    CpuMemoryCounter::DeviceScope host(on_device ? 0 : CpuMemoryCounter::kHost);
    return prefetcher ? prefetcher->next() : loader.next();
  };
  ActivationMeter* meter = nullptr;  // from the measured steps on
  // The next step's batch when the strategy asked for it during this step (it handed it out ahead).
  std::optional<Batch> fetched_ahead;
  // `last_of_section`: the last warm-up or the last measured step, after which nothing is handed out
  // ahead (the sections are apart: statistics reset and the trace starts between them).
  auto one_step = [&](bool last_of_section) {
    if (stop_requested()) throw StopRequested();
    const auto began = std::chrono::steady_clock::now();
    listener.on_step_activity();
    phases.begin_step();
    if (meter) meter->begin_step();
    Batch batch;
    {
      auto scope = phases.scope(Phase::Data);
      if (fetched_ahead) {
        batch = std::move(*fetched_ahead);
        fetched_ahead.reset();
      } else {
        batch = fetch();
      }
    }
    const NextBatch next = [&]() -> std::optional<Batch> {
      if (last_of_section) return std::nullopt;
      if (!fetched_ahead) fetched_ahead = fetch();
      return fetched_ahead;
    };
    loss = strategy->step(batch, phases, next);
    if (group == nullptr) {
      synchronize(devices, spec.world_size);
    } else if (devices.is_cuda()) {
      compat::cuda_synchronize(group->local_rank());  // a rank waits for its own device only
    }
    if (options.slow_by > 0) {  // injected slowdown (--slow-by): inside the step, in its residual
      std::this_thread::sleep_for((std::chrono::steady_clock::now() - began) * options.slow_by);
    }
    phases.end_step();
  };

  for (int i = 0; i < options.warmup; ++i) {
    one_step(/*last_of_section=*/i + 1 == options.warmup);
    listener.on_step_finished();
    listener.on_progress(name, "warm-up", i + 1, options.warmup);
  }
  memory.reset();
  strategy->reset_measured_stats();
  // Activations over the measured steps only, like the peaks.
  ActivationMeter activations(memory, *strategy);
  phases.set_observer(Phase::Forward, [&activations](bool opening) { activations.on_forward(opening); });
  meter = &activations;
  if (options.trace) {
    options.trace->set_context(name, index);
    phases.set_trace(options.trace);  // measured steps only: warm-up is not part of the picture
  }
  // "rep 2/5", or sampling adaptively "rep 2 (to +-3%)": how many is not known ahead.
  char target[32];
  std::snprintf(target, sizeof(target), " (to +-%g%%)", options.target_precision * 100);
  const std::string repetition_label =
      "rep " + std::to_string(index + 1) +
      (options.target_precision > 0 ? std::string(target) : "/" + std::to_string(options.repetitions));
  const double cpu_start = process_cpu_seconds();
  for (int i = 0; i < options.steps; ++i) {
    phases.set_step(options.warmup + i);
    const auto start = std::chrono::steady_clock::now();
    if (case_hangs) announce_injected_hang(name);
    while (hang) std::this_thread::sleep_for(std::chrono::seconds(1));  // injected fault
    if (fault == "kill") raise(SIGKILL);                                 // injected fault
    one_step(/*last_of_section=*/i + 1 == options.steps);
    const auto stop = std::chrono::steady_clock::now();
    listener.on_step_finished();
    rep.step_seconds.push_back(std::chrono::duration<double>(stop - start).count());
    for (int p = 0; p < kPhaseCount; ++p) rep.phase_seconds[p] += phases.step_seconds()[p];
    rep.step_losses.push_back(loss.item<double>());
    listener.on_progress(name, repetition_label, i + 1, options.steps);
  }
  rep.cpu_seconds = process_cpu_seconds() - cpu_start;
  rep.first_loss = rep.step_losses.front();
  rep.final_loss = rep.step_losses.back();
  for (auto& p : rep.phase_seconds) p /= static_cast<double>(options.steps);
  phases.set_observer(Phase::Forward, nullptr);
  rep.memory = memory.read();
  memory.add_held_bytes(rep.memory, strategy->held_tensors());
  activations.fill(rep.memory);
  rep.peak_rss_bytes = MemoryProbe::process_peak_rss_bytes();
  rep.comm = strategy->comm_summary();
  rep.async = strategy->async_summary();
  if (rep.async && !rep.async->worker_peak_rss_bytes.empty()) {
    // The workers allocate in their own processes, out of this one's counters' sight: their peak
    // RSS (in async) is the measure, and the per-device figures are unknown rather than zero.
    for (auto& m : rep.memory) m.peak_allocated_bytes.reset();
  }
  if (!std::isfinite(rep.final_loss)) throw CaseFailure("loss is not finite after " + std::to_string(options.steps) + " steps");
  return rep;
}

}  // namespace ddpbench
