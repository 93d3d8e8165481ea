#pragma once
// Chrome trace-event recording of the harness's step and phase ranges, one file per rank (or
// worker), loadable in Perfetto and chrome://tracing and readable by Holistic Trace Analysis
// (which finds the rank in the top-level "distributedInfo").
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace ddpbench {

class TraceRecorder {
 public:
  TraceRecorder(int rank, int world_size);

  // What the following events belong to (shown as event arguments).
  void set_context(const std::string& case_name, int repetition);
  // A complete event ("ph": "X") on the calling thread; times from the steady clock.
  void record(const char* name, std::chrono::steady_clock::time_point start, std::chrono::steady_clock::time_point end,
              std::int64_t step);
  std::size_t size() const;
  // The whole trace as a JSON document.
  std::string to_json() const;
  // Writes <dir>/ddpbench-rank<rank>.json atomically; returns the path.
  std::string write(const std::string& dir) const;

 private:
  struct Event {
    const char* name;
    std::int64_t start_us;
    std::int64_t duration_us;
    std::uint64_t thread;
    std::int64_t step;
    int context;
  };
  int rank_;
  int world_size_;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<std::pair<std::string, int>> contexts_;  // (case, repetition)
};

}  // namespace ddpbench
