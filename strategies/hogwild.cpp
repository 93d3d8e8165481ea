// `hogwild`: N workers update one shared set of parameters without locks (docs/hogwild.md).
//
// A step is one global batch: each worker takes its even share of the rows and makes one update, so
// after k steps hogwild has seen the same samples as `single` after k steps, and their losses can
// be compared at equal samples seen. Inside a step the workers read and write the shared parameters
// concurrently; the step ends when every worker's update is in (the harness needs a step to time,
// and the next batch to hand out).
//
//   --hogwild-mode threads:   N threads of this process (DeviceWorkers), one HogwildWorker each.
//   --hogwild-mode processes: N worker processes over POSIX shared memory, and on CUDA over one
//                             device allocation shared by CUDA IPC (HogwildProcesses).
#include <algorithm>
#include <atomic>
#include <chrono>

#include "devices/device_workers.h"
#include "base/stats.h"
#include "strategies/strategy.h"
#include "compat/torch_compat.h"
#include "timing/trace.h"
#include "strategies/hogwild_processes.h"
#include "strategies/hogwild_worker.h"

namespace ddpbench {
namespace {

// Even shards of `rows`, the first rows % n one row larger: every worker gets at least one row
// (the harness checks that the batch has a sample per device).
std::vector<std::int64_t> shard_rows(std::int64_t rows, int n) {
  std::vector<std::int64_t> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) out[static_cast<size_t>(i)] = rows / n + (i < rows % n ? 1 : 0);
  return out;
}

class HogwildStrategy final : public Strategy {
 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec& spec, const DeviceSet& devices,
                                                   const StrategyOptions& options) const override {
    const int workers = options.hogwild.workers > 0 ? options.hogwild.workers : spec.world_size;
    if (spec.global_batch < workers) {
      return "needs a sample per worker: global batch " + std::to_string(spec.global_batch) + " for " +
             std::to_string(workers) + " workers (--batch or --workers)";
    }
    if (options.hogwild.mode == HogwildMode::Processes && options.hogwild.worker_executable.empty()) {
      return "hogwild processes mode starts worker processes of the ddpbench executable: run it through ddpbench";
    }
    return std::nullopt;
  }

  void do_setup(const StrategySetup& setup) override {
    workload_ = &setup.workload;
    options_ = setup.options.hogwild;
    // --workers N, by default one per device. On CUDA every worker shares device 0's parameters, each
    // on its own stream; on the CPU worker i runs on virtual device i % world size with that
    // device's cores, so several workers of one device share them.
    workers_count_ = options_.workers > 0 ? options_.workers : setup.spec.world_size;
    device_ = setup.devices.device(0);
    cuda_ = setup.devices.is_cuda();
    model_ = setup.model;
    model_->to(device_);
    model_->train();
    if (options_.mode == HogwildMode::Processes) {
      HogwildProcessesConfig config;
      config.executable = options_.worker_executable;
      config.workload = workload_;
      config.workers = workers_count_;
      // On CUDA every worker trains on device 0, in the memory its parent shares by CUDA IPC, and the
      // workers share the host's cores as threads mode's do.
      config.devices = cuda_ ? 1 : setup.spec.world_size;
      config.cuda_device = cuda_ ? device_.index() : -1;
      config.sync_every = options_.sync_every;
      config.threads_per_worker = setup.devices.threads_per_device();
      config.parity_optimizer = setup.parity_run;
      config.precision = setup.precision;
      config.activation_checkpointing = setup.options.levers.activation_checkpointing;
      config.grad_accum = setup.options.levers.grad_accum;
      config.global_batch = setup.spec.global_batch;
      config.timeout = std::chrono::milliseconds(static_cast<long long>(setup.timeout_seconds * 1000));
      config.stop_requested = setup.stop_requested;
      processes_ = std::make_unique<HogwildProcesses>(config, *model_);
      return;
    }
    const auto parameters = model_->distinct_parameters();
    const auto buffers = model_->distinct_buffers();
    for (int i = 0; i < workers_count_; ++i) {
      if (cuda_) worker_streams_.push_back(compat::cuda_pool_stream(device_.index()));
      workers_.push_back(std::make_unique<HogwildWorker>(clone_model(*model_, device_), parameters, buffers, *workload_,
                                                         setup.make_optimizer, options_.sync_every, updates_,
                                                         setup.precision, i, workers_count_));
      workers_.back()->set_grad_accum(setup.options.levers.grad_accum);
    }
    recorders_.resize(static_cast<size_t>(workers_count_));
    threads_ = std::make_unique<DeviceWorkers>(setup.devices, workers_count_, cuda_ ? 1 : setup.spec.world_size);
  }

  void do_held_tensors(HeldTensors& held) override {
    // Processes mode: the workers' models, gradients and optimizers live in their own processes.
    if (processes_) held.held_by_other_processes = true;
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    if (processes_) return step_processes(batch, phases);
    torch::Tensor inputs, targets;
    {
      auto scope = phases.scope(Phase::Data);
      // Blocking: on CUDA the workers read the batch from their own streams, which would not wait
      // for an asynchronous copy on this thread's stream.
      inputs = batch.inputs.to(device_, /*non_blocking=*/false);
      targets = batch.targets.to(device_, /*non_blocking=*/false);
    }
    const auto rows = shard_rows(inputs.size(0), workers_count_);
    std::vector<std::int64_t> begin(rows.size(), 0);
    for (size_t i = 1; i < rows.size(); ++i) begin[i] = begin[i - 1] + rows[i - 1];
    std::vector<HogwildUpdate> updates(rows.size());
    const auto start = std::chrono::steady_clock::now();
    threads_->run([&](int i) {
      const auto k = static_cast<size_t>(i);
      std::shared_ptr<void> stream;
      if (cuda_) {
        compat::cuda_set_device(device_.index());
        stream = compat::use_cuda_stream(worker_streams_[k]);
      }
      // Each worker's own step range on its own thread, its phases nested in it, in the trace too.
      auto& own = recorders_[k];
      if (cuda_) own.use_cuda_events(device_.index());  // on this worker's own stream
      own.set_trace(phases.trace());
      own.set_step(phases.step_index());
      own.begin_step();
      updates[k] = workers_[k]->step(inputs.narrow(0, begin[k], rows[k]), targets.narrow(0, begin[k], rows[k]), own);
      own.end_step();
    });
    // Worker 0 stands for all in the phase breakdown (the workers run the same phases at once);
    // what it did not mark of the parallel run is waking the workers and waiting for the last.
    const double run = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    add_worker_phases(phases, recorders_[0].step_seconds(), run);
    double loss = 0;
    for (size_t k = 0; k < rows.size(); ++k) {
      loss += updates[k].loss * static_cast<double>(rows[k]);
      if (updates[k].staleness) staleness_.push_back(*updates[k].staleness);
    }
    return torch::tensor(loss / static_cast<double>(inputs.size(0)), torch::kFloat64);
  }

  torch::Tensor step_processes(const Batch& batch, PhaseRecorder& phases) {
    const bool tracing = phases.trace() != nullptr;
    if (sent_ahead_) {
      // Handed out during the last step; the harness gives each step the batch it looked ahead to.
      if (!batch.inputs.is_same(*sent_ahead_)) {
        throw std::logic_error("hogwild: the step's batch is not the one sent ahead to the workers");
      }
      sent_ahead_.reset();
    } else {
      // Copying the batch into the shared buffer and handing out the rows: this mode's scatter.
      auto scope = phases.scope(Phase::Scatter);
      processes_->send(batch, tracing ? std::optional<std::int64_t>(phases.step_index()) : std::nullopt);
    }
    const auto sent = std::chrono::steady_clock::now();
    // The next step's batch, handed out now: each worker goes on to it as soon as this update is
    // done, instead of waiting for the slowest worker, this step's end, the harness and the next
    // copy (as the workers of PyTorch's recipe run on without a barrier). The copy runs while the
    // workers update, so it is not a phase of its own: its cost, if any, shows in theirs.
    if (std::optional<Batch> next = next_batch()) {
      processes_->send(*next, tracing ? std::optional<std::int64_t>(phases.step_index() + 1) : std::nullopt);
      sent_ahead_ = next->inputs;
    }
    // Worker 0's phases as it timed them; the rest of the wait (pipes, wake-ups, a slower worker)
    // is worker_wait.
    const HogwildProcessesStep result = processes_->wait();
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count();
    add_worker_phases(phases, result.worker0_phases, waited);
    if (auto* trace = phases.trace()) {
      for (size_t i = 0; i < result.worker_traces.size(); ++i) {
        trace->merge(result.worker_traces[i], trace->rank(), "hogwild worker " + std::to_string(i) + " process");
      }
    }
    staleness_.insert(staleness_.end(), result.staleness.begin(), result.staleness.end());
    peak_rss_ = result.peak_rss_bytes;
    return torch::tensor(result.loss, torch::kFloat64);
  }

  // Worker 0's phases into the harness's step, and the rest of `parallel` seconds as worker_wait.
  static void add_worker_phases(PhaseRecorder& phases, const PhaseSeconds& worker0, double parallel) {
    for (int p = 0; p < kPhaseCount; ++p) {
      if (worker0[p] <= 0) continue;
      phases.add_measured(static_cast<Phase>(p), worker0[p]);
      parallel -= worker0[p];
    }
    phases.add_measured(Phase::WorkerWait, std::max(0.0, parallel));
  }

  std::vector<torch::Tensor> do_trained_parameters() override { return model_->distinct_parameters(); }
  // Threads mode: the workers take their rows of a batch on device 0 (processes mode: from shared
  // host memory). The harness waits for a prefetched batch on the host, so workers on streams of
  // their own read it complete.
  std::optional<c10::Device> do_batch_device() const override {
    if (processes_) return std::nullopt;
    return device_;
  }

  std::optional<AsyncSummary> do_async_summary() const override {
    AsyncSummary s;
    s.mode = to_string(options_.mode);
    s.workers = workers_count_;
    s.sync_every = options_.sync_every;
    s.updates = static_cast<std::int64_t>(staleness_.size());
    if (!staleness_.empty()) {
      std::vector<double> values(staleness_.begin(), staleness_.end());
      s.staleness_median = stats::median(values);
      s.staleness_mean = stats::mean(values);
      s.staleness_max = *std::max_element(staleness_.begin(), staleness_.end());
    }
    s.worker_peak_rss_bytes = peak_rss_;
    return s;
  }

  void do_reset_measured_stats() override { staleness_.clear(); }

 private:
  const Workload* workload_ = nullptr;
  HogwildOptions options_;
  int workers_count_ = 1;
  c10::Device device_{c10::kCPU};
  bool cuda_ = false;
  // Declared before the model, so the shared memory outlives the model's views of it.
  std::unique_ptr<HogwildProcesses> processes_;
  ModelPtr model_;  // its parameters are the shared ones
  std::atomic<std::uint64_t> updates_{0};
  std::vector<std::unique_ptr<HogwildWorker>> workers_;
  std::vector<std::shared_ptr<void>> worker_streams_;  // CUDA: each worker's own stream, for every step
  std::vector<PhaseRecorder> recorders_;  // threads mode: each worker's own
  std::unique_ptr<DeviceWorkers> threads_;
  std::vector<std::int64_t> staleness_;  // of every update that wrote, since the last reset
  std::vector<std::int64_t> peak_rss_;   // processes mode: each worker process's peak
  std::optional<torch::Tensor> sent_ahead_;  // processes mode: the inputs of the next step's batch, already sent
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"hogwild", "N workers update shared parameters without locks (threads or processes)", 4,
                            /*uses_all_devices=*/true, [] { return std::make_unique<HogwildStrategy>(); },
                            /*multi_process=*/false, /*asynchronous=*/true,
                            /*one_cuda_device=*/true});

}  // namespace ddpbench
