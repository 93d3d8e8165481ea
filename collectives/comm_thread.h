#pragma once
// One thread that runs communication jobs in the order they are posted. A ring of Gloo send/recv
// (shard_collectives.h) blocks the thread that runs it; posted here from a gradient hook, it runs
// while backward goes on, as an NCCL collective runs on its own stream. Every rank posts the same
// jobs in the same order, so the collectives inside them match up. What a job allocates on a CPU
// is counted against the virtual device of the thread that made the CommThread (a rank's device),
// as it would be on that rank's GPU.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace ddpbench {

class CommThread {
 public:
  // `inline_jobs`: run each job on the posting thread instead (CUDA, where NCCL is asynchronous
  // already, and --no-overlap).
  explicit CommThread(bool inline_jobs = false);
  // Runs what is still queued (a job in a failed step ends by its own timeout), then joins.
  ~CommThread();
  CommThread(const CommThread&) = delete;
  CommThread& operator=(const CommThread&) = delete;

  // Queues `job`; returns its ticket for wait(), counting from 1.
  std::uint64_t post(std::function<void()> job);
  // Returns once every posted job has run; rethrows the first job's exception, after which the
  // jobs still queued were dropped (their collectives cannot match up any more).
  void drain();
  // Returns once job `ticket` and every job before it have run (or were dropped); rethrows as drain().
  void wait(std::uint64_t ticket);

 private:
  void loop();

  bool inline_jobs_;
  int memory_device_;  // CpuMemoryCounter's device of the constructing thread
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::function<void()>> jobs_;
  bool running_job_ = false;
  std::uint64_t posted_ = 0, finished_ = 0;  // tickets: jobs posted, and jobs run or dropped
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::thread thread_;
};

}  // namespace ddpbench
