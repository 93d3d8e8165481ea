#include "base/watchdog.h"

namespace ddpbench {

StepWatchdog::StepWatchdog(std::chrono::duration<double> timeout, std::function<void()> on_expiry)
    : timeout_(std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout)),
      on_expiry_(std::move(on_expiry)),
      thread_([this] { loop(); }) {}

StepWatchdog::~StepWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StepWatchdog::arm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = true;
  last_kick_ = std::chrono::steady_clock::now();
  cv_.notify_all();
}

void StepWatchdog::kick() {
  std::lock_guard<std::mutex> lock(mutex_);
  last_kick_ = std::chrono::steady_clock::now();
}

void StepWatchdog::disarm() {
  std::lock_guard<std::mutex> lock(mutex_);
  armed_ = false;
}

bool StepWatchdog::expired() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return expired_;
}

void StepWatchdog::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_ && !expired_) {
    if (!armed_) {
      cv_.wait(lock, [&] { return stopping_ || armed_; });
      continue;
    }
    const auto deadline = last_kick_ + timeout_;
    if (std::chrono::steady_clock::now() >= deadline) {
      expired_ = true;
      lock.unlock();
      on_expiry_();
      return;
    }
    cv_.wait_until(lock, deadline);  // a kick moves the deadline; re-check on wake
  }
}

}  // namespace ddpbench
