#include "devices/device_workers.h"

#include <ATen/Parallel.h>

#include "devices/counting_allocator.h"
#include "compat/torch_compat.h"

namespace ddpbench {

DeviceWorkers::DeviceWorkers(const DeviceSet& devices, int count, int devices_used) : errors_(static_cast<size_t>(count)) {
  const int used = devices_used > 0 ? devices_used : count;
  for (int i = 0; i < count; ++i) {
    threads_.emplace_back([this, i, used, t = devices.threads_per_device(), cuda = devices.is_cuda()] {
      loop(i, i % used, used, t, cuda);
    });
  }
}

DeviceWorkers::~DeviceWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  start_.notify_all();
  for (auto& t : threads_) t.join();
}

void DeviceWorkers::loop(int index, int device, int devices_used, int threads_per_device, bool cuda) {
  // A CPU virtual device keeps to its own cores, as ranks and Hogwild worker processes do: the
  // scheduler then cannot move one device's work onto another's cores mid-step, which shows as noise.
  // Threads of one device share its cores. Before the OpenMP team exists, so that its threads
  // inherit the cores.
  if (!cuda) pin_to_core_slice(device, devices_used, threads_per_device);
  at::set_num_threads(threads_per_device);  // this thread's OpenMP team size
  if (cuda) compat::cuda_set_device(device);
  CpuMemoryCounter::DeviceScope charge_to(device);
  unsigned long seen = 0;
  for (;;) {
    const std::function<void(int)>* task;
    const at::ThreadLocalState* state;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_.wait(lock, [&] { return stopping_ || generation_ != seen; });
      if (stopping_) return;
      seen = generation_;
      task = task_;
      state = &*caller_state_;
    }
    std::exception_ptr error;
    try {
      at::ThreadLocalStateGuard guard(*state);
      (*task)(index);
    } catch (...) {
      error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      errors_[static_cast<size_t>(index)] = error;
      if (--pending_ == 0) done_.notify_all();
    }
  }
}

void DeviceWorkers::run(const std::function<void(int)>& task) {
  std::unique_lock<std::mutex> lock(mutex_);
  task_ = &task;
  caller_state_.emplace();
  pending_ = size();
  ++generation_;
  start_.notify_all();
  done_.wait(lock, [&] { return pending_ == 0; });
  for (auto& e : errors_) {
    if (e) {
      auto first = e;
      for (auto& x : errors_) x = nullptr;
      std::rethrow_exception(first);
    }
  }
}

}  // namespace ddpbench
