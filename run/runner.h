#pragma once
// The harness's loop: plans the cases (case_plan), checks each strategy's parity against `single`
// (parity), then runs rounds of one measured repetition per case (repetition), interleaved across
// cases so that drift of the machine hits every case alike, until each case has what sampling asks
// (sampling). Multi-process cases run on rank processes (rank_tasks). Every update goes to the
// sinks; a step that never finishes trips the --timeout watchdog.
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "devices/device_set.h"
#include "records/result_sink.h"
#include "records/results.h"
#include "run/case_builder.h"
#include "run/parity.h"
#include "run/rank_tasks.h"
#include "run/run_options.h"
#include "run/sampling.h"
#include "run/step_listener.h"
#include "run/stop_request.h"

namespace ddpbench {

class ProcessGroupContext;
class RankLauncher;
class StepWatchdog;
struct RankTaskOutput;

class Runner final : private StepListener {
 public:
  Runner(RunnerOptions options, DeviceSet devices, RunContext context);
  void add_sink(ResultSink* sink) { sinks_.push_back(sink); }

  // Validates what can be validated before anything runs (batch against world size, dataset size);
  // throws UsageError naming the flag.
  void validate() const;
  RunRecord run();

  // Called (on the watchdog's thread) when no step finished within --timeout, after the current
  // case was marked failed and the sinks were given the record; main decides how to end.
  void set_hang_handler(std::function<void(const RunRecord&)> handler) { on_hang_ = std::move(handler); }
  // Called (on the watchdog's thread, which runs only with a hang handler) when a stop was asked for
  // and the step in progress did not reach its end within 1.5 s, after the sinks were given the
  // record with the interruption; main decides how to end.
  void set_stuck_stop_handler(std::function<void(const RunRecord&)> handler) { on_stuck_stop_ = std::move(handler); }

  // This process is one rank of a group (launched by ddpbench, torchrun or Slurm): multi-process
  // strategies run here as that rank, every other strategy is skipped with the reason.
  void set_process_group(ProcessGroupContext* group);
  // Multi-process cases run on ranks this launcher starts, one task at a time.
  void set_rank_launcher(RankLauncher* launcher) { launcher_ = launcher; }
  // In a rank process started by the launcher: runs one task and returns rank 0's encoded result
  // (other ranks return an empty string). Throws what the task threw.
  std::string run_rank_task(const RankTask& task);

 private:
  void check_parity(CaseRecord& record);
  RepetitionRecord run_repetition(const CaseRecord& record, int index);
  // Multi-process cases outside a rank process run on the launcher's ranks.
  bool delegated(const CaseSpec& spec) const;
  RankTaskOutput run_on_ranks(const RankTask& task);
  void notify_live_update();   // while the run goes on (see runner.cpp)
  void notify_final_update();  // the record as the run ends
  void handle_hang();
  void handle_stuck_stop();

  // StepListener
  void on_step_activity() override;  // the watchdog's clock restarts
  void on_step_finished() override;  // and rank 0 of a launcher's task tells the launcher
  void on_progress(const std::string& case_name, const std::string& what, int done, int total) override;

  RunnerOptions options_;
  DeviceSet devices_;
  CaseBuilder builder_{options_, devices_};
  ParityCheck parity_{builder_, *this};
  SamplingPlan sampling_{options_};
  RunRecord record_;
  std::vector<ResultSink*> sinks_;
  // Guards record_ against the watchdog's thread; never held while a step runs.
  std::timed_mutex record_mutex_;
  std::atomic<int> current_case_{-1};
  std::atomic<bool> setting_up_{false};  // run()'s set-up before the first case, under the watchdog
  std::function<void(const RunRecord&)> on_hang_;
  std::function<void(const RunRecord&)> on_stuck_stop_;
  bool finished_ = false;  // under record_mutex_: the run's own end has the record
  StepWatchdog* watchdog_ = nullptr;
  ProcessGroupContext* group_ = nullptr;
  RankLauncher* launcher_ = nullptr;
  bool report_steps_ = false;  // rank 0 of a launcher's task: counts steps in the store
};

}  // namespace ddpbench
