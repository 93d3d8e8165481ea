#pragma once
// Chrome trace-event recording of the harness's step and phase ranges, one file per rank, loadable
// in Perfetto and chrome://tracing and readable by Holistic Trace Analysis (which finds the rank in
// the top-level "distributedInfo").
//
// Times are taken on the steady clock and written as microseconds since the Unix epoch, so the files
// of every rank, however launched, share one time axis.
//
// Events recorded by other processes on this host (the ranks ddpbench's launcher starts, Hogwild's
// worker processes) come back as encoded text and are merged in: their times are the host's
// monotonic clock (std::chrono::steady_clock is CLOCK_MONOTONIC), so they line up with this
// process's on one timeline, each of their threads on a row of its own named after the process.
#include <chrono>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ddpbench {

class TraceRecorder {
 public:
  using Clock = std::chrono::steady_clock;

  // Events recorded here belong to `rank` (the file they are written to).
  TraceRecorder(int rank, int world_size);

  // What the following events belong to (shown as event arguments).
  void set_context(const std::string& case_name, int repetition);
  // A complete event ("ph": "X") on the calling thread: it nests with the thread's other ranges.
  void record(const char* name, Clock::time_point start, Clock::time_point end, std::int64_t step);
  // A range that began on one thread and ended on another, overlapping others of its kind (a
  // collective in flight): an async begin/end pair ("ph": "b"/"e", category "comm", an id of its
  // own), which viewers draw on a track of its own instead of nesting it into a thread's ranges.
  void record_async(const char* name, Clock::time_point start, Clock::time_point end, std::int64_t step);
  std::size_t size() const;
  int rank() const { return rank_; }

  // The events recorded so far as compact text (threads numbered in order of first appearance),
  // for another process's merge(); clear() then starts afresh.
  std::string encode() const;
  void clear();
  // Events another process on this host encoded, in `rank`'s file, under the current context, each
  // of that process's threads on a row named "<process_label>" (its first thread) or
  // "<process_label> thread K". Rows are reused by later merges with the same label, so the tasks of
  // a run that follow one another share rows. Throws std::runtime_error on malformed text.
  void merge(const std::string& encoded, int rank, const std::string& process_label);

  // The file of `rank` as a JSON document (every event recorded or merged for it).
  std::string to_json(int rank) const;
  // Writes <dir>/ddpbench-rank<R>.json atomically for this recorder's rank and every merged one;
  // returns the paths, this recorder's rank first.
  std::vector<std::string> write(const std::string& dir) const;
  static std::string file_name(int rank) { return "ddpbench-rank" + std::to_string(rank) + ".json"; }

 private:
  struct Event {
    std::string name;  // phase names are short: no allocation (small-string storage)
    std::int64_t start_ns;  // steady clock, since its epoch
    std::int64_t end_ns;
    std::uint64_t thread;  // this process's pthread_self(), or a merged row's key
    std::int64_t step;
    int context;
    int rank;
    bool async;
  };
  void add(Event e);
  int rank_;
  int world_size_;
  // Added to the steady clock's readings to give "ts": microseconds since the Unix epoch. Files of
  // ranks on one host then line up exactly (one monotonic clock, each process's offset read at
  // its start), and ranks on other hosts as well as their clocks agree.
  std::int64_t wall_offset_ns_ = 0;
  mutable std::mutex mutex_;
  std::vector<Event> events_;
  std::vector<std::pair<std::string, int>> contexts_;        // (case, repetition)
  std::map<std::string, std::uint64_t> merged_rows_;         // "label#K" -> row key
  std::map<std::uint64_t, std::string> row_names_;           // row key -> thread name
};

}  // namespace ddpbench
