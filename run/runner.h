#pragma once
// The harness: expands the requested workloads x strategies into cases, checks each strategy's
// parity against `single`, then runs warm-up and measured steps for every case, repetitions
// interleaved across cases so that drift of the machine hits every case alike.
#include <atomic>
#include <functional>
#include <mutex>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "data/batch_prefetcher.h"
#include "data/data_loader.h"
#include "devices/device_set.h"
#include "records/results.h"
#include "timing/trace.h"

namespace ddpbench {

struct RunnerOptions {
  std::vector<std::string> workloads;
  std::vector<std::string> strategies;
  std::optional<std::int64_t> global_batch;  // none: each workload's default
  std::optional<std::int64_t> sequence_length;  // --seq-len (gpt2's tokens per sample); none: its default
  DataPath data_path = DataPath::Auto;          // --data-path; auto: prefetch on CUDA, host on CPU
  std::optional<std::int64_t> dataset_size;  // none: 32 global batches
  int steps = 30;
  int warmup = 5;
  int repetitions = 5;  // with target_precision: the fewest a case runs
  // Adaptive sampling (nvbench's stopping on noise, Google Benchmark's min time): with a target, a
  // case takes repetitions, interleaved with the other cases', until the 95% interval of its step
  // time is within +-target_precision (and it has run min_time_seconds of measured steps), or
  // until it has spent max_time_seconds, when it stops unresolved. 0: exactly `repetitions`.
  double target_precision = 0;
  double min_time_seconds = 0;
  double max_time_seconds = 0;
  std::uint64_t seed = 42;
  int parity_steps = 3;
  double parity_tolerance = 1e-5;
  Precision precision = Precision::Fp32;  // --dtype
  std::optional<double> peak_flops;       // --peak-tflops: one device's peak, in FLOP/s (none: the datasheet's)
  double max_cv = 0.05;  // a case whose repetition means vary more is marked noisy
  // --slow-by: every step sleeps this fraction of its own time before it ends, a slowdown injected
  // where the harness times it, to measure what a CI gate detects. 0 in any real measurement.
  double slow_by = 0;
  LoaderOptions loader;
  double timeout_seconds = 300;
  TraceRecorder* trace = nullptr;  // records the measured steps' ranges when set (--trace)
  StrategyOptions strategy;        // ddp's bucket size, overlap, SyncBatchNorm, checkpoint
};

class ProcessGroupContext;
class RankLauncher;
struct RankTaskOutput;

// One unit of a multi-process case that ddpbench's launcher hands to fresh rank processes.
struct RankTask {
  enum class Kind { Parity, Repetition };
  Kind kind = Kind::Parity;
  std::string case_name;
  int repetition = 0;
  bool trace = false;  // a repetition's ranks record trace events and leave them in the store
  std::string encode() const;
  static RankTask decode(const std::string& text);  // throws UsageError on malformed text
};

// Where the runner reports as it goes: the JSON file, the table, the progress line (views).
class ResultSink {
 public:
  virtual ~ResultSink() = default;
  // Called with the whole record after every finished repetition and when a case is settled.
  virtual void on_update(const RunRecord&) {}
  // Called often while a case runs: what runs now.
  virtual void on_progress(const std::string& /*case_name*/, const std::string& /*what*/, int /*done*/,
                           int /*total*/) {}
  virtual void on_finish(const RunRecord&) {}
};

class Runner {
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

  // This process is one rank of a group (launched by ddpbench, torchrun or Slurm): multi-process
  // strategies run here as that rank, every other strategy is skipped with the reason.
  void set_process_group(ProcessGroupContext* group) { group_ = group; }
  // Multi-process cases run on ranks this launcher starts, one task at a time.
  void set_rank_launcher(RankLauncher* launcher) { launcher_ = launcher; }
  // In a rank process started by the launcher: runs one task and returns rank 0's encoded result
  // (other ranks return an empty string). Throws what the task threw.
  std::string run_rank_task(const RankTask& task);

  // Asks a running run to stop at the next step boundary (async-signal-safe).
  static void request_stop();
  static bool stop_requested();

 private:
  struct Reference {
    std::vector<torch::Tensor> parameters;
    double final_loss = 0;
  };

  std::vector<CaseRecord> plan_cases() const;
  std::optional<PeakFlops> case_peak(const StrategyInfo& info, const CaseSpec& spec) const;
  std::int64_t global_batch_for(const Workload& workload) const;
  const Dataset& dataset_for(const Workload& workload, std::int64_t global_batch);
  // A strategy set up for `spec` from the run's seed, and the loader of its shard of the data.
  std::unique_ptr<Strategy> start_strategy(const CaseSpec& spec, OptimizerFactory optimizer, int steps,
                                           bool parity_run);
  BatchLoader make_loader(const Dataset& dataset, const CaseSpec& spec, const Strategy& strategy,
                          bool pin_memory = false) const;
  // The data path a repetition of `strategy` runs: --data-path resolved (auto: prefetch on CUDA,
  // host on CPU), host where the strategy has no single batch device.
  DataPath data_path_for(const Strategy& strategy) const;
  // Trains `steps` steps without timing; returns trained parameters (CPU copies) and the last loss.
  Reference train_untimed(const CaseSpec& spec, int steps);
  // What the parity pass of `spec` trains in (precision.h's parity_dtype); asynchronous strategies,
  // compared by loss, train as they are measured.
  c10::ScalarType parity_dtype_of(const CaseSpec& spec) const;
  void check_parity(CaseRecord& record);
  ParityRecord measure_parity(const CaseSpec& spec);
  void judge_parity(CaseRecord& record, const ParityRecord& parity) const;
  RepetitionRecord run_repetition(const CaseRecord& record, int index);
  RepetitionRecord measure_repetition(const CaseRecord& record, int index);
  // Rank 0 collects every rank's figures (through the store) into `rep`; the others send theirs.
  void gather_ranks(const CaseSpec& spec, RepetitionRecord& rep);
  // Multi-process cases outside a rank process run on the launcher's ranks.
  bool delegated(const CaseSpec& spec) const;
  RankTaskOutput run_on_ranks(const RankTask& task);
  // An asynchronous case's final loss against single's at the same samples seen, if single ran.
  std::optional<LossVsSingle> loss_against_single(const CaseRecord& c) const;
  void finish_case_error(CaseRecord& record, const std::exception& error);
  // Whether a case takes a repetition in round `round`: every round below --repetitions, or,
  // sampling adaptively, until settle() says it is done.
  bool wants_repetition(int round) const;
  // After each repetition: the case's achieved precision, and whether it is done (resolved, or
  // unresolved at --max-time).
  bool settle(CaseRecord& c) const;
  static constexpr int kMaxAdaptiveRepetitions = 1000;
  void notify_update();
  void handle_hang();
  void progress();    // a step finished: the watchdog's clock restarts
  void count_step();  // progress(), and rank 0 of a launcher's task tells the launcher

  RunnerOptions options_;
  DeviceSet devices_;
  RunRecord record_;
  std::vector<ResultSink*> sinks_;
  std::map<std::string, Dataset> datasets_;
  std::map<std::string, Reference> references_;
  // Guards record_ against the watchdog's thread; never held while a step runs.
  std::timed_mutex record_mutex_;
  std::atomic<int> current_case_{-1};
  std::function<void(const RunRecord&)> on_hang_;
  class StepWatchdog* watchdog_ = nullptr;
  ProcessGroupContext* group_ = nullptr;
  RankLauncher* launcher_ = nullptr;
  bool report_steps_ = false;  // rank 0 of a launcher's task: counts steps in the store
};

}  // namespace ddpbench
