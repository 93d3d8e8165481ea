#pragma once
// This process's membership of a group of ranks: the rendezvous store and the c10d process group
// (Gloo on CPU, NCCL on CUDA), with the few collectives the harness and the ddp strategy use.
// Every wait is bounded by --timeout; a peer that died or hung surfaces as a CommFailure.
#include <torch/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "compat/c10d_compat.h"
#include "devices/device_set.h"
#include "base/errors.h"
#include "distributed/rank_env.h"

namespace ddpbench {

// A store holds bytes; what ddpbench keeps there is text.
inline std::vector<uint8_t> as_bytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }
inline std::string as_string(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

// A collective that failed or timed out: a peer died, hung, or the network broke.
class CommFailure : public CaseFailure {
 public:
  using CaseFailure::CaseFailure;
};

// DDPBENCH_NCCL_WAIT: true for `stream` (the default, also when unset or empty), false for `host`
// (ProcessGroupContext::wait says what each does); anything else is a UsageError naming the variable.
bool nccl_waits_on_the_stream();

class ProcessGroupContext {
 public:
  // Joins the group `env` describes: connects to (or, as rank 0 without a launcher, hosts) the
  // store, checks that every rank agrees on the world size, then builds the process group. Bad
  // environment, a taken port, an unreachable MASTER_ADDR or disagreeing ranks throw UsageError
  // naming the variable, within `timeout`. c10d's client itself waits with no bound on a listener
  // that accepts and never answers: when `on_silent_rendezvous` is given, it is called (on another
  // thread, with the one line to say) once connecting and a first exchange with the store have
  // taken `timeout` and 2 s more; the caller ends the process there.
  static std::unique_ptr<ProcessGroupContext> join(const RankEnv& env, DeviceKind kind, std::chrono::milliseconds timeout,
                                                   const std::function<void(const std::string&)>& on_silent_rendezvous = {});
  // A group over an existing store (threads as ranks in the tests).
  ProcessGroupContext(c10::intrusive_ptr<c10d::Store> store, int rank, int size, DeviceKind kind,
                      std::chrono::milliseconds timeout, const std::string& hostname = "127.0.0.1");
  // Shuts the process group down (NCCL's communicators released, no exit-time warning).
  ~ProcessGroupContext();
  ProcessGroupContext(const ProcessGroupContext&) = delete;
  ProcessGroupContext& operator=(const ProcessGroupContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_rank() const { return local_rank_; }
  DeviceKind kind() const { return kind_; }
  std::string backend_name() const;
  std::chrono::milliseconds timeout() const { return timeout_; }
  c10d::Store& store() { return *store_; }

  // Starts an all-reduce (sum) of one flat tensor; wait with wait().
  c10::intrusive_ptr<c10d::Work> allreduce_async(const torch::Tensor& flat);
  // Waits within the timeout; throws CommFailure saying what was awaited. On Gloo the host blocks
  // until the collective has ended. On NCCL only the calling thread's current stream waits for it
  // and the host runs on to queue the next kernels; the timeout is then the group's NCCL watchdog's
  // (PyTorch 2.x's default TORCH_NCCL_ASYNC_ERROR_HANDLING aborts and ends the process, so a hung
  // peer still leaves no hang; not yet tested on a GPU). DDPBENCH_NCCL_WAIT=host blocks the
  // host on NCCL too (c10d 2.x's WorkNCCL::wait polls when given a timeout): on an H200 that took
  // gpt2's tp at world 1 from 85.5 to 131.5 ms a step and ddp from 57.6 to 60.0
  // (docs/results/h200-issue47-visit3).
  void wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const;
  // Whether the host waits for every collective to end, so that host-clock time around one is its
  // transfer: Gloo, and NCCL under DDPBENCH_NCCL_WAIT=host. Otherwise it would time a launch.
  bool host_waits_for_collectives() const { return !stream_waits_; }
  void allreduce(const torch::Tensor& flat, const std::string& what);
  // The element-wise maximum over the ranks, in place (a vocabulary-parallel loss's row maxima).
  void allreduce_max(const torch::Tensor& flat, const std::string& what);
  // Point to point, for rings built from them (collectives/): one contiguous tensor to or from one
  // rank; both sides name the same tag.
  c10::intrusive_ptr<c10d::Work> send_async(const torch::Tensor& flat, int to, int tag);
  c10::intrusive_ptr<c10d::Work> recv_async(const torch::Tensor& flat, int from, int tag);
  // The backend's own flat reduce-scatter (sum; this rank's shard of `input` into `output`) and
  // all-gather (every rank's `input` into `output`, rank order). NCCL has both; Gloo has neither in
  // 1.13 and only an all-reduce plus a slice in 2.x, so on CPU collectives/ builds rings instead.
  c10::intrusive_ptr<c10d::Work> reduce_scatter_base_async(torch::Tensor output, torch::Tensor input);
  c10::intrusive_ptr<c10d::Work> allgather_base_async(torch::Tensor output, torch::Tensor input);
  // A group of some of this group's ranks (`members`, ranks of this group, this one among them, in
  // the order that gives each its rank in the new group) over this group's store, under `name`: a
  // mesh dimension's (distributed/mesh.h). Every member calls it with the same name and members;
  // groups of other members may be built at the same time. The same backend, timeout and device.
  std::unique_ptr<ProcessGroupContext> subgroup(const std::string& name, const std::vector<int>& members) const;
  // Rank 0's values into every rank's `tensors` (flattened per dtype: one collective each).
  void broadcast_from_rank0(const std::vector<torch::Tensor>& tensors, const std::string& what);
  void barrier(const std::string& what);

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<compat::CollectiveBackend> group_;
  int rank_ = 0;
  int size_ = 1;
  int local_rank_ = 0;
  DeviceKind kind_ = DeviceKind::Cpu;
  std::chrono::milliseconds timeout_;
  std::string hostname_;  // the address Gloo binds its pairs to
  bool stream_waits_ = false;  // NCCL unless DDPBENCH_NCCL_WAIT=host (wait's comment)
};

}  // namespace ddpbench
