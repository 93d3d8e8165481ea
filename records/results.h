#pragma once
// The results of a run as plain data, stored once in SI units (seconds, bytes, samples/s). The
// JSON file, the terminal table and the progress line are views over these records.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "devices/memory_probe.h"
#include "devices/peak_flops.h"
#include "timing/phase_recorder.h"
#include "records/run_context.h"
#include "strategies/strategy.h"

namespace ddpbench {

// Ok: runnable, and every repetition so far measured. NotRun: runnable but not reached (a run that
// was interrupted or stopped first; what a live file says of the cases still to come). Failed and
// Oom are sticky: a case that failed in any repetition keeps them, its earlier repetitions partial.
enum class CaseStatus { Ok, Skipped, NotRun, Failed, Oom };
const char* to_string(CaseStatus status);

// One rank's own figures in a repetition of a multi-process case, gathered to rank 0.
struct RankRecord {
  int rank = 0;
  std::string host;
  double mean_step_seconds = 0;
  PhaseSeconds phase_seconds{};       // mean per step
  double cpu_seconds = 0;
  std::optional<std::int64_t> peak_rss_bytes;
  std::vector<DeviceMemory> memory;   // this rank's device(s)
};

struct RepetitionRecord {
  int index = 0;
  std::vector<double> step_seconds;   // every measured step
  double cpu_seconds = 0;             // process CPU time over the measured steps, all threads
  PhaseSeconds phase_seconds{};       // mean per step
  std::vector<DeviceMemory> memory;   // peaks over the measured steps
  std::optional<std::int64_t> peak_rss_bytes;
  double first_loss = 0;              // loss of the first and last measured steps
  double final_loss = 0;
  // Every measured step's loss; measured step i has seen (warm-up + i + 1) global batches.
  std::vector<double> step_losses;
  std::vector<RankRecord> ranks;      // multi-process cases: every rank, rank 0 first
  std::optional<CommSummary> comm;    // strategies that all-reduce: rank 0's communication
  std::optional<AsyncSummary> async;  // asynchronous strategies: staleness of the updates
  std::string data_path;              // where batches were placed: host, prefetch or device

  double mean_step_seconds() const;
  // The repetition's lower-quartile step (25th percentile, interpolated): the figure adaptive
  // sampling and ddpbench-compare take its precision over. A shared machine only ever adds time
  // to a step, in stretches of a few steps to seconds; the lower quartile is what the code costs
  // when a quarter of the steps ran clear of them (the minimum's argument, as in Chen & Revels
  // 2016 and Julia's BenchmarkTools, without resting on one lucky step). Measured on the 2-core
  // VM: it resolves an A/A pair 2-4x tighter than the mean (docs/ci.md).
  double lower_quartile_step_seconds() const;
  // Slowest rank over the median rank, by the time each spent on its own work per step (step
  // minus exposed communication, which is where a fast rank waits for a slow one); none with
  // fewer than two ranks.
  std::optional<double> straggler_spread() const;
};

// The bytes each rank sends per step where every collective is NCCL's ring: an all-reduce sends
// 2(N-1)/N of its payload, a reduce-scatter or an all-gather (N-1)/N. The measure by which ZeRO's
// table compares the strategies (1x ddp for zero1 and zero2, 1.5x for fsdp). pp's sends to its
// neighbouring stages are added as they are.
std::int64_t ring_bytes_sent(const CommSummary& comm);
// nccl-tests' bus bandwidth of the gradient all-reduce: bytes x 2(n-1)/n / time, in bytes/s.
std::optional<double> bus_bandwidth(const CommSummary& comm);

// The part of a device's peak that is not parameters, gradients or optimizer state held between
// steps: activations, communication buffers, temporaries. Nothing where a part is unknown.
std::optional<std::int64_t> other_peak_bytes(const DeviceMemory& memory);

struct ParityRecord {
  int steps = 0;
  double max_rel_param_diff = 0;  // max|p - p_ref| / max|p_ref|, over every parameter element
  double final_loss = 0;
  double reference_final_loss = 0;
  double tolerance = 0;
  bool within_tolerance = true;
  std::string reference = "single";
  std::string dtype = "fp32";  // what the parity pass trained in: fp64 under --dtype fp32, else --dtype
  std::string note;  // why a difference is expected, where it is
  // Asynchronous strategies are compared by loss at equal samples seen: the parameter difference is
  // reported but not judged against the tolerance.
  bool compared_by_loss = false;
  // Where a comparison by parameters fails: the parameters that differ most, by name, each with its
  // own max|p - p_ref| / max|p_ref| ("fc3.bias 5.6e-03, fc3.weight 2.1e-03"); empty when within.
  std::string worst_parameters;
  // False where the parity pass could not train the model at all (the note says why): no verdict.
  bool checked = true;
};

// An asynchronous strategy's loss against `single`'s after the same samples (the same steps of the
// same global batches, from the same initial weights): its statistical price.
struct LossVsSingle {
  std::int64_t samples_seen = 0;
  double loss = 0;            // median over repetitions of the final measured step's loss
  double reference_loss = 0;  // single's, likewise
  double ratio() const { return reference_loss != 0 ? loss / reference_loss : 0; }
};

struct CaseRecord {
  CaseSpec spec;
  DeviceKind device_kind = DeviceKind::Cpu;
  int threads_per_device = 1;
  CaseStatus status = CaseStatus::Ok;
  std::string reason;
  std::string note;  // what a reader should know about an ok case (e.g. a degenerate world size)
  WorkloadFacts facts;
  // The peak rate of every device the case computes on (one device's times their number), when
  // known: from NVIDIA's datasheets for the GPU at the run's --dtype, or --peak-tflops.
  std::optional<PeakFlops> peak;
  std::vector<RepetitionRecord> repetitions;
  std::optional<ParityRecord> parity;
  std::vector<Phase> phases_used;
  std::optional<double> scaling_efficiency;
  std::optional<LossVsSingle> loss_vs_single;  // asynchronous strategies, when single ran too
  // CV of the repetition means above --max-cv: the machine's noise is too large to trust the numbers.
  bool noisy = false;
  // Half-width of the 95% interval, over repetitions, of the repetitions' lower-quartile steps,
  // relative (0.03 = +-3%): what the repetitions pin down for a comparison; none with fewer than two.
  std::optional<double> achieved_precision;
  // Adaptive sampling stopped the case at --max-time before it reached --target-precision.
  bool unresolved = false;
  // CV of the repetition means over its workload's noise floor, where that is known and above zero.
  std::optional<double> cv_over_noise_floor;
  double seconds_spent = 0;  // wall time of its repetitions, warm-up and start-up included

  // A case whose numbers stand: ok, with at least one repetition. Rankings and ratios use only these.
  bool measured() const { return status == CaseStatus::Ok && !repetitions.empty(); }
  // Each repetition's mean step time, in seconds: the independent samples the headline figures
  // (median step, samples/s, CV, noise floor) are taken over.
  std::vector<double> repetition_means() const;
  // Each repetition's lower-quartile step, in seconds: what precision (and ddpbench-compare) is of.
  std::vector<double> repetition_lower_quartiles() const;
  // Medians over repetitions of the per-repetition means; callers check repetitions is not empty.
  double median_step_seconds() const;
  double median_items_per_second() const;
  // Achieved arithmetic rate at `items_per_second` samples/s (the workload's FLOPs per sample).
  double flops_at(double items_per_second) const { return items_per_second * facts.flops_per_sample; }
};

struct RunSettings {
  int steps = 0;
  int warmup = 0;
  int repetitions = 0;
  std::uint64_t seed = 0;
  int parity_steps = 0;
  double parity_tolerance = 0;
  Precision precision = Precision::Fp32;
  double max_cv = 0;
  double slow_by = 0;
  double target_precision = 0;  // 0: a fixed number of repetitions
  double min_time_seconds = 0;
  double max_time_seconds = 0;
  int loader_workers = 0;
  bool pin_memory = false;
  DeviceKind device_kind = DeviceKind::Cpu;
  int world_size = 1;
  int threads_per_device = 1;
  double timeout_seconds = 0;
  StrategyOptions strategy_options;  // --bucket-mb, --no-overlap, --reshard-after-forward, --hogwild-mode, ...
  // What each workload of the run is, by name: a TorchScript model's file and spec, a plug-in's own words.
  std::map<std::string, std::string> workload_descriptions;
};

// The machine's own noise for a workload: the CV of `single`'s repetition means, the plainest case
// (one device, no communication), so what varies there is the machine. A case far above it varies
// for reasons of its own.
struct NoiseFloor {
  std::string workload;
  double cv = 0;
  int repetitions = 0;
};

struct RunRecord {
  RunContext context;
  RunSettings settings;
  std::vector<CaseRecord> cases;
  std::vector<NoiseFloor> noise_floor;  // per workload where single was measured
  bool complete = false;  // false while running, and in what an interrupted run leaves
  std::string interruption;
};

// Fills record.noise_floor from single's cases and each case's cv_over_noise_floor.
void set_noise_floor(RunRecord& record);

// The figures that compare a run's cases with each other, once every repetition is in: each
// measured case's scaling efficiency against single, an asynchronous case's loss against single's
// at equal samples seen, the noisy mark (CV above settings.max_cv), the phases used, and the noise
// floor (set_noise_floor).
void set_comparative_figures(RunRecord& record);

}  // namespace ddpbench
