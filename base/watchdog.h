#pragma once
// Fires once when no kick() came for `timeout` while armed: how a run that hangs inside a step
// (a deadlock, a lost peer) still ends within --timeout, with its results kept.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ddpbench {

class StepWatchdog {
 public:
  // `on_expiry` runs on the watchdog's own thread, at most once.
  StepWatchdog(std::chrono::duration<double> timeout, std::function<void()> on_expiry);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  void arm();     // starts watching; the clock starts now
  void kick();    // progress: the clock restarts
  void disarm();  // stops watching (between cases, at the end)
  bool expired() const;

 private:
  void loop();

  std::chrono::steady_clock::duration timeout_;
  std::function<void()> on_expiry_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stopping_ = false;
  bool expired_ = false;
  std::chrono::steady_clock::time_point last_kick_;
  std::thread thread_;
};

}  // namespace ddpbench
