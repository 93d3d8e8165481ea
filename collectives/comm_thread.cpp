#include "collectives/comm_thread.h"

#include "devices/counting_allocator.h"

namespace ddpbench {

CommThread::CommThread(bool inline_jobs)
    : inline_jobs_(inline_jobs), memory_device_(CpuMemoryCounter::current_device()) {
  if (!inline_jobs_) thread_ = std::thread([this] { loop(); });
}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::uint64_t CommThread::post(std::function<void()> job) {
  if (inline_jobs_) {
    std::uint64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ticket = ++posted_;
      if (failure_) {  // as the thread does: nothing runs after a failure until drain() reports it
        finished_ = ticket;
        return ticket;
      }
    }
    try {
      job();
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      failure_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = ticket;
    return ticket;
  }
  std::uint64_t ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    jobs_.push_back(std::move(job));
    ticket = ++posted_;
  }
  changed_.notify_all();
  return ticket;
}

void CommThread::wait(std::uint64_t ticket) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this, ticket] { return finished_ >= ticket; });
  if (failure_) {
    auto failure = failure_;
    failure_ = nullptr;
    std::rethrow_exception(failure);
  }
}

void CommThread::drain() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return jobs_.empty() && !running_job_; });
  if (failure_) {
    auto failure = failure_;
    failure_ = nullptr;
    std::rethrow_exception(failure);
  }
}

void CommThread::loop() {
  CpuMemoryCounter::DeviceScope device(memory_device_);
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [this] { return stopping_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and nothing left
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    if (failure_) {  // dropped: see drain()
      ++finished_;
      changed_.notify_all();
      continue;
    }
    running_job_ = true;
    lock.unlock();
    try {
      job();
    } catch (...) {
      lock.lock();
      failure_ = std::current_exception();
      lock.unlock();
    }
    lock.lock();
    running_job_ = false;
    ++finished_;
    changed_.notify_all();
  }
}

}  // namespace ddpbench
