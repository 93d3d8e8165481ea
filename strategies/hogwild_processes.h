#pragma once
// Hogwild's processes mode: the model's parameters and buffers, the shared update counter and a
// batch buffer live in one POSIX shared-memory object that N worker processes map. Workers are
// started with fork+exec of the ddpbench executable (posix_spawn: never a bare fork of this
// multi-threaded process) and get the object and two pipes by file descriptor. Per step the parent
// copies the global batch into the (reused) batch buffer and sends each worker its rows; each worker
// updates the shared parameters in place, without locks, and replies with its loss and staleness.
//
// Faults: a worker that dies shows as end-of-file on its pipe, and the step fails naming it and how
// it ended; a worker that hangs fails the step after the timeout. Either way every worker left is
// killed and reaped. Workers die with the parent (PR_SET_PDEATHSIG), and the shared object has no
// name after its creation (SharedMemoryRegion), so nothing outlives a run, however it ends.
//
// The batch buffer has two slots, so a step can be sent before the last one's replies are in: the
// workers then go from one update to the next without waiting for the parent (hogwild.cpp sends
// the harness's next batch ahead, within a section of the run).
//
// On CUDA the parameters, buffers and batch slots live instead in one device allocation exported
// with a CUDA IPC handle (compat/cuda_ipc.h), which the control block in shared memory carries:
// every worker maps it on the same GPU and builds its parameters as views of it, so updates go
// straight into the shared device memory. The parent frees it only after every worker has been
// reaped (and not before the last of its own views of it is gone), however the workers ended; a
// worker's own device memory goes with its process.
#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <memory>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/data_loader.h"
#include "timing/phase_recorder.h"
#include "devices/precision.h"
#include "distributed/shared_memory.h"
#include "workloads/workload.h"

namespace ddpbench {

struct HogwildProcessesConfig {
  std::string executable;  // the ddpbench binary
  const Workload* workload = nullptr;
  int workers = 2;
  int devices = 2;  // CPU virtual devices the workers are spread over: worker i on device i % devices
  int cuda_device = -1;  // the GPU every worker trains on, sharing its memory by CUDA IPC; -1: the CPU
  int sync_every = 1;
  int threads_per_worker = 1;
  bool parity_optimizer = false;  // the workload's parity optimizer instead of its own
  Precision precision = Precision::Fp32;  // --dtype
  CheckpointPolicy activation_checkpointing;  // --activation-checkpointing, in every worker's model
  int grad_accum = 1;                          // --grad-accum, in every worker's update
  std::int64_t global_batch = 0;
  std::uint64_t seed = 0;
  std::chrono::milliseconds timeout{300000};
  std::function<bool()> stop_requested = [] { return false; };  // the run's; checked while waiting
};

struct HogwildProcessesStep {
  double loss = 0;  // over the global batch
  std::vector<std::int64_t> staleness;  // of the workers' updates that wrote this step
  PhaseSeconds worker0_phases{};        // forward, backward, optimizer as worker 0 timed them
  std::vector<std::int64_t> peak_rss_bytes;  // each worker process's peak so far
  std::vector<std::string> worker_traces;     // each worker's trace events of this update (TraceRecorder::encode)
};

class HogwildProcesses {
 public:
  // Moves `model`'s parameters and buffers into shared memory (the model keeps working on them),
  // starts the workers and waits until each has mapped them. Throws CaseFailure naming a worker
  // that could not start.
  HogwildProcesses(HogwildProcessesConfig config, WorkloadModel& model);
  ~HogwildProcesses();  // ends the workers: end-of-file on their command pipes, SIGKILL after a grace
  HogwildProcesses(const HogwildProcesses&) = delete;
  HogwildProcesses& operator=(const HogwildProcesses&) = delete;

  // One update by every worker on its rows of `batch`, in two halves: send() copies the batch into
  // a free slot of the shared buffer and hands out the rows, wait() collects every worker's reply to
  // the oldest step sent. Two steps may be in flight (send, send, wait, send, wait, ...); a third
  // send before a wait is a logic error. Both throw CaseFailure naming a failed worker. With
  // `trace_step`, the workers record the update's step and phase ranges under that step number and
  // send them back.
  void send(const Batch& batch, std::optional<std::int64_t> trace_step = std::nullopt);
  HogwildProcessesStep wait();

  std::vector<pid_t> worker_pids() const;

 private:
  struct Worker {
    pid_t pid = -1;
    int command_fd = -1;  // parent writes
    int reply_fd = -1;    // parent reads
    bool running = false;
  };
  void spawn(int index);
  // Reads one reply from every worker in `pending` within the timeout; fails the step on a fault.
  template <typename OnReply>
  void collect(const char* what, OnReply on_reply);
  [[noreturn]] void fail(int index, const std::string& reason);
  // A view of the shared data at `offset`. On CUDA it holds the device allocation: the parent's
  // model keeps working on its views after this object is gone.
  torch::Tensor shared_view(std::int64_t offset, c10::IntArrayRef sizes, c10::ScalarType dtype) const;
  void stop_all(bool kill_now);

  HogwildProcessesConfig config_;
  SharedMemoryRegion region_;
  struct ControlBlock* control_ = nullptr;
  std::shared_ptr<void> device_buffer_;  // CUDA: the parameters, buffers and batch slots
  void* data_ = nullptr;                 // where the tensors' offsets count from: region_ or device_buffer_
  torch::Device data_device_{torch::kCPU};
  std::vector<Worker> workers_;
  std::int64_t next_step_ = 0;
  struct InFlight {
    std::vector<std::int64_t> shard_rows;  // each worker's
    std::int64_t rows = 0;
  };
  std::deque<InFlight> in_flight_;  // sent, replies not yet collected; oldest first
  // The kernel's OOM-kill count as the workers started: a worker killed by SIGKILL is named the
  // OOM killer's when it rose since.
  std::optional<long long> oom_kills_before_;
};

// A worker process: ddpbench started with DDPBENCH_HOGWILD_WORKER set. Returns its exit code.
bool is_hogwild_worker_process();
int hogwild_worker_main();

}  // namespace ddpbench
