#include "run/runner.h"

#include <ATen/Parallel.h>

#include <chrono>
#include <new>
#include <sstream>

#include "base/errors.h"
#include "base/watchdog.h"
#include "devices/counting_allocator.h"
#include "devices/memory_probe.h"
#include "distributed/process_group.h"
#include "distributed/rank_launcher.h"
#include "records/record_codec.h"
#include "run/case_plan.h"
#include "run/repetition.h"

namespace ddpbench {
namespace {

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

// First line of an exception message: LibTorch appends C++ backtraces that do not belong in a table.
void finish_case_error(CaseRecord& record, const std::exception& error) {
  record.status = is_out_of_memory(error) ? CaseStatus::Oom : CaseStatus::Failed;
  record.reason = first_line(error.what());
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

}  // namespace

Runner::Runner(RunnerOptions options, DeviceSet devices, RunContext context)
    : options_(std::move(options)), devices_(devices) {
  configure_workloads({devices_.is_cuda(), options_.sequence_length, options_.gpt2_size, options_.gpt2_plain_loss});
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
  s.strategy_options = options_.strategy;
  for (const auto& w : options_.workloads) s.workload_descriptions[w] = WorkloadRegistry::instance().get(w).description();
}

void Runner::validate() const { validate_plan(options_, devices_); }

void Runner::set_process_group(ProcessGroupContext* group) {
  group_ = group;
  builder_.set_process_group(group);
}

bool Runner::delegated(const CaseSpec& spec) const {
  return launcher_ != nullptr && group_ == nullptr && StrategyRegistry::instance().get(spec.strategy).multi_process;
}

RankTaskOutput Runner::run_on_ranks(const RankTask& task) {
  return launcher_->run(
      task.encode(), [this](std::int64_t) { on_step_activity(); }, [] { return stop_requested(); });
}

void Runner::check_parity(CaseRecord& record) {
  const int steps = options_.parity_steps;
  if (steps == 0) return;
  for (auto* sink : sinks_) sink->on_progress(record.spec.name(), "parity check", 0, steps);
  const ParityRecord parity = delegated(record.spec)
                                  ? codec::decode_parity(run_on_ranks({RankTask::Kind::Parity, record.spec.name(), 0}).result)
                                  : parity_.measure(record.spec);
  judge_parity(record, parity, options_.strategy.ddp.sync_bn);
  if (group_ != nullptr) share_parity_verdict(*group_, record);
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
  RepetitionRecord rep = measure_repetition(builder_, *this, record, index);
  if (group_ != nullptr) gather_ranks(*group_, record.spec, rep);
  return rep;
}

std::string Runner::run_rank_task(const RankTask& task) {
  CpuMemoryCounter::install();
  at::set_num_threads(devices_.threads_per_device());
  record_.cases = plan_cases(options_, devices_, group_, launcher_ != nullptr);
  report_steps_ = group_ != nullptr && group_->rank() == 0;
  for (auto& c : record_.cases) {
    if (c.spec.name() != task.case_name) continue;
    if (c.status != CaseStatus::Ok) throw CaseFailure(c.reason);
    if (task.kind == RankTask::Kind::Parity) {
      const ParityRecord parity = parity_.measure(c.spec);
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

void Runner::notify_final_update() {
  for (auto* sink : sinks_) sink->on_update(record_);
}

// A file written while the run goes on says what the run would say if it ended at that moment: a
// case with nothing measured yet is not_run, the run is not complete, and its interruption says
// so. A run killed outright (SIGKILL, SIGBUS, a lost machine) leaves that file as its last word,
// never a case marked ok with nothing behind it.
void Runner::notify_live_update() {
  if (sinks_.empty()) return;
  RunRecord live = record_;
  live.complete = false;
  live.interruption = "the run had not finished when this file was written (still running, or killed); "
                      "measured repetitions are kept";
  mark_not_reached(live.cases, "the run had not reached it when this file was written");
  for (auto* sink : sinks_) sink->on_update(live);
}

void Runner::on_step_activity() {
  if (watchdog_) watchdog_->kick();
}

void Runner::on_step_finished() {
  on_step_activity();
  if (report_steps_) group_->store().add(task_keys::kSteps, 1);
}

void Runner::on_progress(const std::string& case_name, const std::string& what, int done, int total) {
  for (auto* sink : sinks_) sink->on_progress(case_name, what, done, total);
}

void Runner::handle_hang() {
  std::ostringstream seconds;
  seconds << options_.timeout_seconds;
  std::string reason = setting_up_ ? "timed out: set-up (LibTorch's intra-op thread pool) did not finish within " + seconds.str() +
                                        " s (--timeout)"
                                  : "timed out: no step finished within " + seconds.str() + " s (--timeout)";
  CaseStatus status = CaseStatus::Failed;
  // Near its address-space limit, a step that stops making progress has most likely had an
  // allocation fail inside a library that retries it forever (OpenBLAS's buffers): out of memory,
  // said with the figures, rather than a hang nobody can explain.
  if (const auto space = MemoryProbe::address_space(); space && space->mapped_bytes * 5 >= space->limit_bytes * 4) {
    status = CaseStatus::Oom;
    reason += " at the address-space limit: the process maps " + std::to_string(space->mapped_bytes >> 20) + " MiB of the " +
              std::to_string(space->limit_bytes >> 20) + " MiB that ulimit -v allows, so " +
              (setting_up_ ? "the pool's threads could not all start; raise or lift ulimit -v, or give fewer --threads"
                           : "an allocation failed where a library retries it (OpenBLAS does); raise or lift ulimit -v");
  }
  // The main thread is stuck inside a step and holds no lock; if it does hold it, it is not stuck
  // in a step, and the last complete JSON stays as it is.
  std::unique_lock<std::timed_mutex> lock(record_mutex_, std::chrono::seconds(2));
  if (lock.owns_lock() && finished_) return;  // the run reached its end on its own
  if (lock.owns_lock()) {
    const int current = current_case_.load();
    if (current >= 0) {
      auto& c = record_.cases[static_cast<size_t>(current)];
      c.status = status;
      c.reason = reason;
    }
    record_.interruption = "stopped by the --timeout watchdog; measured repetitions are kept";
    mark_not_reached(record_.cases, "the --timeout watchdog stopped the run first");
    record_.complete = false;
    notify_final_update();
    for (auto* sink : sinks_) sink->on_finish(record_);
  }
  if (on_hang_) on_hang_(record_);
}

// A stop asked for (a signal, a --json that cannot be written) that the step in progress has not
// reached in this long: the step is stuck where it cannot see it, and the run ends here instead.
// Under the 2 s promised for an interrupt, above the second the launcher gives its ranks to end.
constexpr std::chrono::milliseconds kStopGrace{1500};

void Runner::handle_stuck_stop() {
  std::unique_lock<std::timed_mutex> lock(record_mutex_, std::chrono::seconds(2));
  if (!lock.owns_lock() || finished_) return;  // the run reached its end on its own
  record_.interruption = stop_reason() + "; the step in progress did not end within " +
                         std::to_string(kStopGrace.count()) + " ms of it, so the run ended there; measured repetitions are kept";
  mark_not_reached(record_.cases, "the run was interrupted first");
  record_.complete = false;
  notify_final_update();
  for (auto* sink : sinks_) sink->on_finish(record_);
  if (on_stuck_stop_) on_stuck_stop_(record_);
}

RunRecord Runner::run() {
  CpuMemoryCounter::install();
  {
    std::lock_guard<std::timed_mutex> lock(record_mutex_);
    record_.cases = plan_cases(options_, devices_, group_, launcher_ != nullptr);
    record_.complete = false;
    // What a live file says of the cases still to come; each becomes ok when its turn comes.
    mark_not_reached(record_.cases, "the run ended before this case's turn");
    notify_live_update();
  }
  std::optional<StepWatchdog> watchdog;
  if (on_hang_) {
    watchdog.emplace(std::chrono::duration<double>(options_.timeout_seconds), [this] { handle_hang(); });
    if (on_stuck_stop_) {
      watchdog->watch_stop([] { return stop_requested(); }, kStopGrace, [this] { handle_stuck_stop(); });
    }
    watchdog_ = &*watchdog;
    watchdog->arm();
  }
  // LibTorch's thread pool, under the watchdog: near an address-space limit (ulimit -v) its threads
  // can fail to start and this call then never returns. A hang here is the first case's, which
  // cannot start without it.
  for (std::size_t i = 0; i < record_.cases.size() && current_case_ < 0; ++i) {
    if (record_.cases[i].status == CaseStatus::NotRun) current_case_ = static_cast<int>(i);
  }
  setting_up_ = true;
  at::set_num_threads(devices_.threads_per_device());
  setting_up_ = false;
  current_case_ = -1;
  on_step_activity();
  bool interrupted = false;

  try {
    for (size_t i = 0; i < record_.cases.size(); ++i) {
      if (record_.cases[i].status != CaseStatus::NotRun) continue;
      current_case_ = static_cast<int>(i);
      on_step_activity();
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
      notify_live_update();
    }
    // Rounds of one repetition per case still going, interleaved so that the machine's drift
    // falls on every case alike.
    std::vector<bool> settled(record_.cases.size(), false);
    for (int rep = 0;; ++rep) {
      bool ran = false;
      for (size_t i = 0; i < record_.cases.size(); ++i) {
        if (record_.cases[i].status != CaseStatus::Ok || settled[i] || !sampling_.wants_repetition(rep)) continue;
        ran = true;
        current_case_ = static_cast<int>(i);
        on_step_activity();
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
          settled[i] = sampling_.settle(c);
        } else {
          c.status = failed.status;
          c.reason = failed.reason;
        }
        notify_live_update();
      }
      if (!ran) break;
    }
  } catch (const StopRequested&) {
    interrupted = true;
  }
  current_case_ = -1;
  if (watchdog) watchdog->disarm();
  watchdog_ = nullptr;
  std::lock_guard<std::timed_mutex> lock(record_mutex_);
  finished_ = true;  // from here the watchdog's handlers leave the record to this thread
  if (interrupted) record_.interruption = stop_reason() + "; measured repetitions are kept";
  if (!record_.interruption.empty()) mark_not_reached(record_.cases, "the run was interrupted first");
  set_comparative_figures(record_);
  record_.complete = record_.interruption.empty();
  notify_final_update();
  for (auto* sink : sinks_) sink->on_finish(record_);
  return record_;
}

}  // namespace ddpbench
