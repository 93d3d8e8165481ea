#pragma once
// Fires once when no kick() came for `timeout` while armed: how a run that hangs inside a step
// (a deadlock, a lost peer) still ends within --timeout, with its results kept.
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

namespace ddpbench {

class StepWatchdog {
 public:
  // `on_expiry` runs on the watchdog's own thread, at most once.
  StepWatchdog(std::chrono::duration<double> timeout, std::function<void()> on_expiry);
  ~StepWatchdog();
  StepWatchdog(const StepWatchdog&) = delete;
  StepWatchdog& operator=(const StepWatchdog&) = delete;

  // Also watches for a stop that is never reached: once `stop_requested` has returned true for
  // `grace` while armed, `on_stuck_stop` runs instead of `on_expiry` (at most one of them runs, once).
  // A run asked to stop ends at its next step boundary; a step stuck in a library that never
  // returns (a BLAS retrying an allocation forever) would otherwise ignore the request until
  // --timeout. Call before arm().
  void watch_stop(std::function<bool()> stop_requested, std::chrono::duration<double> grace,
                  std::function<void()> on_stuck_stop);

  void arm();     // starts watching; the clock starts now
  void kick();    // progress: the clock restarts
  void disarm();  // stops watching (between cases, at the end)
  bool expired() const;

 private:
  void loop();

  std::chrono::steady_clock::duration timeout_;
  std::function<void()> on_expiry_;
  std::function<bool()> stop_requested_;  // none: stops are not watched
  std::chrono::steady_clock::duration stop_grace_{};
  std::function<void()> on_stuck_stop_;
  std::optional<std::chrono::steady_clock::time_point> stop_seen_;
  mutable std::mutex mutex_;
  std::condition_variable cv_;
  bool armed_ = false;
  bool stopping_ = false;
  bool expired_ = false;
  std::chrono::steady_clock::time_point last_kick_;
  std::thread thread_;
};

}  // namespace ddpbench
