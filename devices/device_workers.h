#pragma once
// Persistent threads, one per device by default (or several per device), so that replicas run concurrently (at::parallel_for runs
// inline with one intra-op thread, so it cannot do this). Each worker is bound to its device for
// life: its intra-op thread count, its CUDA device, and the virtual device its CPU allocations
// are charged to. Persistent threads also keep each worker's OpenMP team alive between steps.
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <ATen/ThreadLocalState.h>

#include "devices/device_set.h"

namespace ddpbench {

class DeviceWorkers {
 public:
  // `count` threads; thread i works on device i % devices_used (default: one thread per device).
  DeviceWorkers(const DeviceSet& devices, int count, int devices_used = 0);
  ~DeviceWorkers();
  DeviceWorkers(const DeviceWorkers&) = delete;
  DeviceWorkers& operator=(const DeviceWorkers&) = delete;

  int size() const { return static_cast<int>(threads_.size()); }
  // Runs task(i) on thread i for every i at once, with the caller's LibTorch thread-local
  // state (grad mode, autocast, ...); returns when all are done and rethrows the first failure.
  void run(const std::function<void(int)>& task);

 private:
  void loop(int index, int device, int devices_used, int threads_per_device, bool cuda);

  std::vector<std::thread> threads_;
  std::mutex mutex_;
  std::condition_variable start_;
  std::condition_variable done_;
  const std::function<void(int)>* task_ = nullptr;
  std::optional<at::ThreadLocalState> caller_state_;
  unsigned long generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
  std::vector<std::exception_ptr> errors_;
};

}  // namespace ddpbench
