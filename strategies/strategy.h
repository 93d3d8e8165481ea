#pragma once
// A parallel-training strategy: one class in one file under strategies/, registered by name with
// one line. The harness owns the loop, the timing, the NVTX ranges and the memory probes; a
// strategy only fills in the hooks below (public non-virtual methods call the protected do_*).
#include <torch/types.h>

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "data/data_loader.h"
#include "devices/device_set.h"
#include "devices/memory_probe.h"
#include "timing/phase_recorder.h"
#include "devices/precision.h"
#include "pipeline/balance.h"
#include "pipeline/schedule.h"
#include "workloads/activation_checkpointing.h"
#include "workloads/workload.h"

namespace ddpbench {

class ProcessGroupContext;

// The batch of the step after the current one, or nothing (Strategy::step).
using NextBatch = std::function<std::optional<Batch>()>;

// Flags that shape one strategy's mechanics (the ones not every strategy shares).
struct DdpOptions {
  double bucket_mb = 25;             // --bucket-mb (zero1 and zero2 bucket by it too)
  bool overlap = true;               // --no-overlap turns it off (in zero1 and zero2 too)
  bool grad_as_bucket_view = false;  // --grad-as-bucket-view
  bool sync_bn = false;              // --sync-bn
  std::string checkpoint_path;       // --checkpoint (empty: none)
  int checkpoint_every = 0;          // --checkpoint-every (0: at the end of each repetition)
};

// How Hogwild's workers run (docs/hogwild.md).
enum class HogwildMode { Threads, Processes };
const char* to_string(HogwildMode mode);

struct HogwildOptions {
  HogwildMode mode = HogwildMode::Threads;  // --hogwild-mode
  int sync_every = 1;                       // --sync-every: 1 is plain Hogwild
  int workers = 0;                          // --workers: 0 is one per device
  std::string worker_executable;            // the ddpbench binary, started for processes mode
};

// fsdp's mechanics (docs/sharded.md); --no-overlap (DdpOptions::overlap) applies to it too.
struct FsdpOptions {
  bool reshard_after_forward = true;  // --reshard-after-forward off: SHARD_GRAD_OP
  bool prefetch = true;               // --no-prefetch: each all-gather when its unit needs it
};

// pp's shape (docs/pipeline.md).
struct PipelineOptions {
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::OneFOneB;  // --pp-schedule
  int microbatches = 0;     // --microbatches; 0: 2 x stages, or the most below that divides the batch
  int stages_per_rank = 0;  // --stages-per-rank; 0: 2 under interleaved-1f1b, else 1
  pipeline::BalanceKind balance = pipeline::BalanceKind::Time;  // --pp-balance
  std::vector<std::size_t> split;  // --pp-split: cut points between stages; empty: cut by `balance`
};

// tp's (docs/tensor-parallel.md).
struct TensorParallelOptions {
  // --sequence-parallel: each all-reduce of the blocks becomes a reduce-scatter into shares of the
  // sequence and an all-gather back, and the LayerNorms and residual adds run on the rank's share.
  bool sequence_parallel = false;
};

// The memory levers every strategy takes (docs/memory.md).
struct MemoryLeverOptions {
  // --activation-checkpointing: which wrap units keep only their input and recompute in backward.
  CheckpointPolicy activation_checkpointing;
  // --grad-accum K: each step's batch in K micro-batches, their gradients summed before the one
  // optimizer step (strategies/microbatches.h).
  int grad_accum = 1;
  // --sync-every-microbatch (ddp, zero1, zero2): reduce the gradients after every micro-batch, not
  // only after the last (DDP without no_sync), to show what that costs.
  bool sync_every_microbatch = false;
  // --no-sync-accum (fsdp): keep each unit's unsharded gradients until the last micro-batch and
  // reduce-scatter once (FSDP2's set_requires_gradient_sync(False)), instead of every micro-batch.
  bool no_sync_accum = false;
};

struct StrategyOptions {
  MemoryLeverOptions levers;
  DdpOptions ddp;
  HogwildOptions hogwild;
  FsdpOptions fsdp;
  PipelineOptions pipeline;
  TensorParallelOptions tp;
  // --mesh as parsed and checked (distributed/mesh.h's text, "dp=2,tp=2"); empty: none, each
  // strategy over the whole world. tp composes with dp or fsdp on it, pp with dp (docs/mesh.md).
  std::string mesh;
};
// The mesh dimensions --mesh knows: a model-parallel one (tp or pp, whose strategy runs on the mesh)
// and a data-parallel one (dp or fsdp).
inline const std::vector<std::string>& mesh_dimension_names() {
  static const std::vector<std::string> names{"dp", "fsdp", "tp", "pp"};
  return names;
}

// One point of the sweep: a workload under a strategy on `world_size` devices.
struct CaseSpec {
  std::string workload;
  std::string strategy;
  int world_size = 1;
  std::int64_t global_batch = 0;
  // "<workload>/<strategy>/world:<N>", the benchmark name in the JSON.
  std::string name() const;
};

// What a communicating strategy moved per step, averaged over the steps since the last reset.
struct CommSummary {
  std::string backend;                      // "gloo", "nccl"
  int world_size = 1;
  std::int64_t bytes_per_step = 0;          // all-reduced payload per rank and step
  int buckets = 0;                          // collectives per step
  double allreduce_seconds_per_step = 0;    // time some all-reduce was in flight, per step
  // Whether the host waited for each collective to end, so that the seconds here (these, the
  // buckets' and the sharded ones) are transfers on the host clock: false on NCCL, where only the
  // stream waits (ProcessGroupContext::wait), and the JSON then says null rather than launch times.
  bool collective_seconds_measured = true;
  // Each bucket in launch order, what a projection to other world sizes and networks replays
  // (scripts/ddpbench-project): its payload, when its last gradient was ready (from the start of
  // backward) and how long its collective took from launch to completion, per step: ddp's
  // all-reduce, or zero1's and zero2's reduce-scatter (theirs have reduce_scatter_bytes_per_step).
  struct Bucket {
    std::int64_t bytes = 0;
    double ready_seconds = 0;
    double allreduce_seconds = 0;  // the bucket's collective, whichever it is
  };
  std::vector<Bucket> bucket_timeline;
  // The sharded strategies (zero1, zero2): the payloads reduce-scattered and all-gathered per rank
  // and step (the padded buckets; bytes_per_step is then only the loss's all-reduce), and the time
  // each rank spent in them.
  std::int64_t reduce_scatter_bytes_per_step = 0;
  std::int64_t all_gather_bytes_per_step = 0;
  double reduce_scatter_seconds_per_step = 0;
  double all_gather_seconds_per_step = 0;
  // tp: how many of its collectives a step (`buckets`) were reduce-scatters and all-gathers (under
  // --sequence-parallel), the rest all-reduces; none where a strategy does not count them apart.
  std::optional<int> reduce_scatters_per_step;
  std::optional<int> all_gathers_per_step;
  // On a mesh (--mesh), each dimension's traffic apart, in the mesh's order: its name and size, the
  // bytes this rank's collectives over that dimension's group carried per step and how many there
  // were. Empty without a mesh (the figures above are then the whole world's).
  struct MeshTraffic {
    std::string name;
    int size = 1;
    std::int64_t bytes_per_step = 0;
    int collectives_per_step = 0;
  };
  std::vector<MeshTraffic> mesh;
  // fsdp: each unit's padded parameter bytes, in the order the units were built (the root, gathered
  // once for the whole step, flagged), so that a projection need not take them as equal.
  struct ShardedUnit {
    std::int64_t bytes = 0;
    bool root = false;
  };
  std::vector<ShardedUnit> units;
  // pp: activations and their gradients sent to the neighbouring stages, per rank and step, and
  // the pipeline that ran: its schedule, shape, each stage's chain units [begin, end) and the
  // bubble its formula gives for equal stages (pipeline::expected_bubble).
  std::int64_t point_to_point_bytes_per_step = 0;
  struct Pipeline {
    std::string schedule;
    int stages = 0;
    int microbatches = 0;
    int chunks_per_rank = 1;
    std::vector<std::pair<std::int64_t, std::int64_t>> stage_units;
    double expected_bubble = 0;
    std::string balance;                         // how the stages were cut: time, params, even, split
    std::vector<std::int64_t> stage_parameters;  // elements each stage holds
    std::vector<double> stage_profile_seconds;   // profiled forward + backward a stage; empty unless balance is time
    // Each chain unit's, the head's counted with unit 0 and the tail's with the last: what a
    // projection re-cuts the chain by for another number of stages.
    std::vector<std::int64_t> unit_parameters;
    std::vector<double> unit_profile_seconds;  // empty unless balance is time
  };
  std::optional<Pipeline> pipeline;
};

// What an asynchronous strategy's workers did since the last reset: how stale their updates were.
struct AsyncSummary {
  std::string mode;                  // "threads", "processes"
  int workers = 0;
  int sync_every = 1;
  std::int64_t updates = 0;          // writes into the shared parameters
  // Staleness of an update: how many other updates landed between the worker's read of the shared
  // parameters and its write, from the shared update counter.
  double staleness_median = 0;
  std::int64_t staleness_max = 0;
  double staleness_mean = 0;
  std::vector<std::int64_t> worker_peak_rss_bytes;  // processes mode: each worker process's peak
};

using OptimizerFactory = std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

struct StrategySetup {
  const Workload& workload;
  const CaseSpec& spec;
  const DeviceSet& devices;
  ModelPtr model;  // freshly initialised on the CPU from the run's seed; the strategy owns it now
  // The harness chooses the optimizer: the workload's for timed runs, its parity optimizer for the
  // parity check. Strategies build theirs with this, never with the workload directly.
  OptimizerFactory make_optimizer;
  StrategyOptions options{};
  int steps_per_run = 0;                           // warm-up plus measured (or parity) steps
  ProcessGroupContext* process_group = nullptr;    // this process's rank group (multi-process strategies)
  // The run is the parity check (make_optimizer is the workload's parity optimizer), for strategies
  // that must rebuild the optimizer elsewhere, in another process.
  bool parity_run = false;
  double timeout_seconds = 300;  // --timeout: how long a strategy's own workers may take to answer
  // --dtype: forward passes run in an AutocastScope, optimizers step through a LossScaler.
  Precision precision = Precision::Fp32;
  // True once the run is asked to stop (SIGINT, SIGTERM, SIGHUP): a strategy that waits on its own
  // workers checks it while waiting and throws RunInterrupted, so no wait outlasts a signal.
  std::function<bool()> stop_requested = [] { return false; };
};

// The workload's own optimizer, for timed runs.
OptimizerFactory training_optimizer(const Workload& workload);
// The workload's parity optimizer, for the parity check.
OptimizerFactory parity_optimizer(const Workload& workload);

class Strategy {
 public:
  virtual ~Strategy() = default;

  // Why this case cannot run here (reported as skipped), or nothing.
  std::optional<std::string> unsupported_reason(const CaseSpec& spec, const DeviceSet& devices,
                                                const StrategyOptions& options) const {
    return do_unsupported_reason(spec, devices, options);
  }
  // What the table should say under a case of this strategy on a workload with `facts` (a note that
  // changes how its figures read), or nothing.
  std::optional<std::string> case_note(const CaseSpec& spec, const WorkloadFacts& facts) const {
    return do_case_note(spec, facts);
  }
  // The part of each global batch this process trains on.
  DataShard data_shard() const { return do_data_shard(); }
  // The one device this process's whole share of each batch goes to, where the harness may place
  // batches ahead of the step (--data-path prefetch or device); nothing where the strategy spreads
  // a batch over devices itself (dp's scatter) or hands it to other processes. Valid after setup.
  std::optional<c10::Device> batch_device() const { return do_batch_device(); }
  // Every optimizer the strategy builds through setup.make_optimizer is noted, for held_tensors();
  // it must live as long as the strategy (every strategy keeps its own as a member).
  void setup(const StrategySetup& setup);
  // One training step on `batch`; returns the step's loss over the global batch (a detached scalar).
  // Marks its phases on `phases`; the harness times the whole step around it. A step begins by
  // setting the last step's gradients to none (PyTorch 2's zero_grad(), set_to_none=True), timed as
  // optimizer work, as PyTorch's profiler shows zero_grad: the optimizer phase is two spans a step,
  // and freeing large gradients is not left out of every phase. So they are held between steps, where
  // held_tensors() counts them, and not through the next forward; what a strategy's communication keeps (ddp's buckets, zero1's full
  // gradient buffers) lives on, as in PyTorch's DDP.
  //
  // `next`, where the caller can say, gives the batch of the step after this one in the same section
  // of the run (warm-up or measured steps), or nothing after its last: a strategy that hands batches
  // to workers ahead of time asks for it (next_batch()), and the caller's next step is given the
  // same batch. Without it (the parity pass, tests), next_batch() is always nothing.
  torch::Tensor step(const Batch& batch, PhaseRecorder& phases, const NextBatch& next = nullptr);
  // The trained parameters as one model would hold them, for the parity check against `single`.
  std::vector<torch::Tensor> trained_parameters() { return do_trained_parameters(); }
  // Communication since the last reset (strategies that all-reduce), or nothing.
  std::optional<CommSummary> comm_summary() const { return do_comm_summary(); }
  // Staleness and update counts since the last reset (asynchronous strategies), or nothing.
  std::optional<AsyncSummary> async_summary() const { return do_async_summary(); }
  // Called when the measured steps begin: communication and staleness count from here.
  void reset_measured_stats() { do_reset_measured_stats(); }
  // What it holds between steps, by kind, for the memory probe: the trained parameters and every
  // parameter its optimizers step, their gradients, and its optimizers' state. A strategy that
  // holds more (buffers of its own) adds them in do_held_tensors.
  HeldTensors held_tensors();

 protected:
  virtual std::optional<std::string> do_unsupported_reason(const CaseSpec&, const DeviceSet&,
                                                           const StrategyOptions&) const {
    return std::nullopt;
  }
  virtual std::optional<std::string> do_case_note(const CaseSpec&, const WorkloadFacts&) const { return std::nullopt; }
  virtual DataShard do_data_shard() const { return {}; }
  virtual std::optional<c10::Device> do_batch_device() const { return std::nullopt; }
  virtual void do_setup(const StrategySetup& setup) = 0;
  virtual torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) = 0;
  virtual std::vector<torch::Tensor> do_trained_parameters() = 0;
  virtual std::optional<CommSummary> do_comm_summary() const { return std::nullopt; }
  virtual std::optional<AsyncSummary> do_async_summary() const { return std::nullopt; }
  virtual void do_reset_measured_stats() {}
  virtual void do_held_tensors(HeldTensors&) {}
  // The parameters it holds between steps, for held_tensors(): the trained ones by default; fsdp's
  // trained parameters are gathered for the parity check, and between steps it holds only chunks.
  virtual std::vector<torch::Tensor> do_held_parameters() { return do_trained_parameters(); }
  // Inside do_step: the next step's batch, when the caller looks ahead and this step is not its
  // section's last (see step()).
  std::optional<Batch> next_batch() const { return next_batch_ && *next_batch_ ? (*next_batch_)() : std::nullopt; }

 private:
  // Where a checkpointed unit's recomputation is timed (the `recompute` phase): a scope of the step's
  // recorder on the step's own thread, else host seconds per thread, the longest moved out of
  // backward at the step's end (concurrent replicas recompute side by side).
  struct RecomputeTiming {
    std::mutex mutex;
    PhaseRecorder* phases = nullptr;  // the step in progress's, or null
    std::thread::id step_thread;
    std::unordered_map<std::thread::id, double> off_thread_seconds;
  };
  RecomputeScope recompute_scope();
  std::shared_ptr<RecomputeTiming> recompute_timing_ = std::make_shared<RecomputeTiming>();
  const NextBatch* next_batch_ = nullptr;  // the step in progress's, or null
  std::mutex optimizers_mutex_;  // hogwild's workers may build theirs on their own threads
  std::vector<const torch::optim::Optimizer*> optimizers_;
};

struct StrategyInfo {
  std::string name;
  std::string description;
  int display_order = 0;        // position in --list and in `all`
  bool uses_all_devices = true; // false: always one device (single)
  std::function<std::unique_ptr<Strategy>()> create;
  // One process per rank: the harness runs its cases in rank processes, spawned by ddpbench's
  // launcher or started by torchrun/Slurm, and gives each its process group.
  bool multi_process = false;
  // Workers update shared parameters without synchronising: the strategy is compared with `single`
  // by loss at equal samples seen, not by parameters (a difference is its price, not a failure).
  bool asynchronous = false;
  // On CUDA it computes on device 0 alone, however many GPUs there are (hogwild's workers share it),
  // so its peak rate is one GPU's.
  bool one_cuda_device = false;
  // It runs the model as a chain cut into stages (WorkloadModel::chain_length): a model that is not
  // written as one (a TorchScript file, a plug-in that declares none) is skipped, saying so.
  bool needs_chain = false;
  // It splits the model's linear layers over the ranks (WorkloadModel::tensor_parallel_plan): a
  // model with no plan is skipped, saying so.
  bool needs_tensor_parallel_plan = false;
};

class StrategyRegistry {
 public:
  static StrategyRegistry& instance();
  void add(StrategyInfo info);
  // Throws UsageError naming --strategy and the known names.
  const StrategyInfo& get(const std::string& name) const;
  std::vector<std::string> names() const;  // in display order

 private:
  std::vector<StrategyInfo> strategies_;
};

struct StrategyRegistration {
  explicit StrategyRegistration(StrategyInfo info) { StrategyRegistry::instance().add(std::move(info)); }
};

#define DDPBENCH_STRATEGY_CONCAT_(a, b) a##b
#define DDPBENCH_STRATEGY_CONCAT(a, b) DDPBENCH_STRATEGY_CONCAT_(a, b)
// DDPBENCH_REGISTER_STRATEGY({"name", "one line", order, uses_all_devices, [] { return ...; }});
// Named by __COUNTER__, not __LINE__: a unity build compiles several strategy files as one.
#define DDPBENCH_REGISTER_STRATEGY(...)                                                                \
  static const ::ddpbench::StrategyRegistration DDPBENCH_STRATEGY_CONCAT(ddpbench_strategy_, __COUNTER__) { \
    ::ddpbench::StrategyInfo __VA_ARGS__                                                               \
  }

}  // namespace ddpbench
