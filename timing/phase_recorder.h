#pragma once
// Phase timing and NVTX ranges, owned by the harness. A strategy only says which phase it is in
// (`auto s = phases.scope(Phase::Forward);`); the recorder times it and opens the matching NVTX
// range in the `ddpbench` domain, so every strategy is measured and traced the same way.
#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace ddpbench {

class TraceRecorder;

enum class Phase : int {
  Data,
  Replicate,
  Scatter,
  Forward,
  GatherLoss,
  Backward,
  Recompute,  // --activation-checkpointing: a checkpointed unit's forward run again inside backward
  Reduce,
  CommExposed,
  ReduceScatterExposed,  // sharded strategies: reduce-scatters backward did not hide
  AllGatherExposed,      // sharded strategies: all-gathers of parameters nothing hid
  WorkerWait,  // asynchronous workers: the step's end waits for the last worker's update
  PipelineWait,  // pp: a stage waits on its neighbours' sends (the bubble, and transfers not hidden)
  Optimizer,
  Checkpoint,
  kCount
};
constexpr int kPhaseCount = static_cast<int>(Phase::kCount);
const char* phase_name(Phase phase);  // the JSON key and the NVTX range name

using PhaseSeconds = std::array<double, kPhaseCount>;

class PhaseRecorder {
 public:
  // A scope opened inside another counts its time as its own, not the enclosing one's: phases are
  // exclusive, so they still add up to the step (fsdp's all-gather waits inside forward).
  class Scope {
   public:
    Scope(PhaseRecorder& recorder, Phase phase);
    // The NVTX range named "<phase> <detail>" ("forward mb3 stage1": pp's micro-batch and stage),
    // so a profiler tells the pieces of one phase apart; the time and the trace are the phase's.
    Scope(PhaseRecorder& recorder, Phase phase, const std::string& detail);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    PhaseRecorder& recorder_;
    Phase phase_;
    std::chrono::steady_clock::time_point start_;
    std::shared_ptr<void> start_event_;  // with CUDA events
    Scope* parent_ = nullptr;            // the scope this one opened inside
    double nested_seconds_ = 0;          // host clock: the time of the scopes opened inside this one
    std::vector<std::size_t> nested_events_;  // CUDA events: theirs, as indices into pending_
  };

  [[nodiscard]] Scope scope(Phase phase) { return Scope(*this, phase); }
  [[nodiscard]] Scope scope(Phase phase, const std::string& detail) { return Scope(*this, phase, detail); }

  // A range that begins on one thread and ends on another: a collective in flight. It is an NVTX
  // start/end range in the ddpbench domain (Nsight shows it beside the thread's nested ranges) and,
  // while a trace is recorded, an async trace range (TraceRecorder::record_async): ranges in flight
  // overlap one another, and a completion can be seen on any thread, the step's own included (a
  // callback attached to finished work runs at once). Not part of the step's phase times.
  struct AsyncRange {
    bool active = false;
    std::uint64_t nvtx_id = 0;
    TraceRecorder* trace = nullptr;
    const char* name = "";
    std::int64_t step = 0;
    std::chrono::steady_clock::time_point start{};
  };
  AsyncRange begin_async(const char* name) const;
  static void end_async(const AsyncRange& range);  // on any thread; ignores an inactive range

  // On a CUDA device, time the phases with CUDA events on the calling thread's current stream of
  // `device` instead of the host's clock: the host only launches GPU work, so its clock would
  // measure launches, and the GPU's time is what a phase costs. The events are read in end_step(),
  // after the harness has synchronized the device. -1 (the default): the steady clock. The trace's
  // ranges stay on the host's clock (one timeline with the other processes).
  void use_cuda_events(int device) { cuda_device_ = device; }

  // Where to record each step and phase range, with this step number (none: no trace).
  void set_trace(TraceRecorder* trace) { trace_ = trace; }
  void set_step(std::int64_t step) { step_index_ = step; }
  TraceRecorder* trace() const { return trace_; }
  std::int64_t step_index() const { return step_index_; }

  // One NVTX `step` range around each step; the phases of the step nest inside it.
  void begin_step();
  void end_step();
  // A phase timed elsewhere (in a worker process) during this step: counted, but with no NVTX
  // range or trace event of this process's, since it did not run here.
  void add_measured(Phase phase, double seconds);
  // Moves `seconds` of this step from phase `from` to `to` (at most what `from` has), once the step's
  // phases are known (end_step): time measured on another thread inside one of this thread's
  // scopes (a recomputation on an autograd device thread, inside backward). Thread-safe.
  void move_measured(Phase from, Phase to, double seconds);
  // Called as each scope of `phase` opens (true) and closes (false), on the thread that opens it,
  // outside the scope's own time: the harness reads memory at forward's edges. One at a time; an
  // empty function removes it.
  void set_observer(Phase phase, std::function<void(bool opening)> observer) {
    observed_phase_ = phase;
    observer_ = std::move(observer);
  }
  // Seconds spent in each phase during the current step (valid after end_step(), which waits for
  // the phases' CUDA events).
  const PhaseSeconds& step_seconds() const { return step_; }
  // Which phases were marked at least once since construction.
  bool used(Phase phase) const { return used_[static_cast<int>(phase)]; }

 private:
  PhaseSeconds step_{};
  std::array<bool, kPhaseCount> used_{};
  TraceRecorder* trace_ = nullptr;
  std::int64_t step_index_ = 0;
  std::chrono::steady_clock::time_point step_start_{};
  int cuda_device_ = -1;
  Scope* open_ = nullptr;  // the innermost scope open now
  struct PendingEvents {
    Phase phase;
    std::shared_ptr<void> start, end;
    std::vector<std::size_t> nested;  // pending_ entries of the scopes inside it, not its own time
  };
  std::vector<PendingEvents> pending_;  // this step's phases timed by CUDA events, read at end_step()
  struct Move {
    Phase from, to;
    double seconds;
  };
  std::unique_ptr<std::mutex> moves_mutex_ = std::make_unique<std::mutex>();  // a pointer: recorders move (hogwild's vector)
  std::vector<Move> moves_;  // this step's move_measured, applied at end_step()
  Phase observed_phase_ = Phase::kCount;
  std::function<void(bool)> observer_;
};

}  // namespace ddpbench
