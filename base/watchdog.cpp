#include "base/watchdog.h"

#include <algorithm>

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

void StepWatchdog::watch_stop(std::function<bool()> stop_requested, std::chrono::duration<double> grace,
                              std::function<void()> on_stuck_stop) {
  std::lock_guard<std::mutex> lock(mutex_);
  stop_requested_ = std::move(stop_requested);
  stop_grace_ = std::chrono::duration_cast<std::chrono::steady_clock::duration>(grace);
  on_stuck_stop_ = std::move(on_stuck_stop);
  cv_.notify_all();
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
    const auto now = std::chrono::steady_clock::now();
    if (stop_requested_ && !stop_seen_ && stop_requested_()) stop_seen_ = now;
    if (stop_seen_ && now >= *stop_seen_ + stop_grace_) {
      expired_ = true;
      lock.unlock();
      on_stuck_stop_();
      return;
    }
    const auto deadline = last_kick_ + timeout_;
    if (now >= deadline) {
      expired_ = true;
      lock.unlock();
      on_expiry_();
      return;
    }
    // A kick moves the deadline; re-check on wake. A stop request is a flag set by a signal
    // handler, which cannot notify: it is polled.
    auto wake = deadline;
    if (stop_seen_) {
      wake = std::min(wake, *stop_seen_ + stop_grace_);
    } else if (stop_requested_) {
      wake = std::min(wake, now + std::chrono::milliseconds(50));
    }
    cv_.wait_until(lock, wake);
  }
}

}  // namespace ddpbench
