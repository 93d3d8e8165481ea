#include "harness/trace.h"

#include <pthread.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "harness/atomic_file.h"

namespace ddpbench {

TraceRecorder::TraceRecorder(int rank, int world_size)
    : rank_(rank), world_size_(world_size), origin_(std::chrono::steady_clock::now()) {
  contexts_.emplace_back("", 0);
}

void TraceRecorder::set_context(const std::string& case_name, int repetition) {
  std::lock_guard<std::mutex> lock(mutex_);
  contexts_.emplace_back(case_name, repetition);
}

void TraceRecorder::record(const char* name, std::chrono::steady_clock::time_point start,
                           std::chrono::steady_clock::time_point end, std::int64_t step) {
  using std::chrono::duration_cast;
  using std::chrono::microseconds;
  Event e{name,
          duration_cast<microseconds>(start - origin_).count(),
          duration_cast<microseconds>(end - start).count(),
          static_cast<std::uint64_t>(pthread_self()),
          step,
          0};
  std::lock_guard<std::mutex> lock(mutex_);
  e.context = static_cast<int>(contexts_.size()) - 1;
  events_.push_back(e);
}

std::size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string TraceRecorder::to_json() const {
  using nlohmann::json;
  std::lock_guard<std::mutex> lock(mutex_);
  json events = json::array();
  std::vector<std::uint64_t> threads;
  for (const auto& e : events_) {
    auto it = std::find(threads.begin(), threads.end(), e.thread);
    if (it == threads.end()) it = threads.insert(threads.end(), e.thread);
    const auto& [case_name, repetition] = contexts_[static_cast<size_t>(e.context)];
    events.push_back({{"name", e.name},
                      {"cat", std::string(e.name) == "step" ? "step" : "phase"},
                      {"ph", "X"},
                      {"ts", e.start_us},
                      {"dur", e.duration_us},
                      {"pid", rank_},
                      {"tid", static_cast<int>(it - threads.begin())},
                      {"args", {{"case", case_name}, {"repetition", repetition}, {"step", e.step}}}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank_},
                    {"args", {{"name", "ddpbench rank " + std::to_string(rank_)}}}});
  return json{{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"distributedInfo", {{"rank", rank_}, {"world_size", world_size_}, {"backend", "ddpbench"}}}}
      .dump();
}

std::string TraceRecorder::write(const std::string& dir) const {
  const std::string path = dir + "/ddpbench-rank" + std::to_string(rank_) + ".json";
  write_file_atomically(path, to_json());
  return path;
}

}  // namespace ddpbench
