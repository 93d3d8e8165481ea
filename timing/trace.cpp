#include "timing/trace.h"

#include <pthread.h>

#include <algorithm>
#include <climits>
#include <set>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "base/atomic_file.h"

namespace ddpbench {
namespace {

std::int64_t since_epoch_ns(TraceRecorder::Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// Merged rows are keyed apart from pthread_self() values, which are user-space addresses.
constexpr std::uint64_t kMergedRowTag = std::uint64_t{1} << 63;

}  // namespace

TraceRecorder::TraceRecorder(int rank, int world_size)
    : rank_(rank), world_size_(world_size) {
  // Read the two clocks back to back, taking the pair read closest together of a few tries.
  std::int64_t best_gap = INT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const auto before = Clock::now();
    const auto wall = std::chrono::system_clock::now();
    const auto after = Clock::now();
    const std::int64_t gap = since_epoch_ns(after) - since_epoch_ns(before);
    if (gap < best_gap) {
      best_gap = gap;
      wall_offset_ns_ = std::chrono::duration_cast<std::chrono::nanoseconds>(wall.time_since_epoch()).count() -
                        (since_epoch_ns(before) + gap / 2);
    }
  }
  contexts_.emplace_back("", 0);
}

void TraceRecorder::set_context(const std::string& case_name, int repetition) {
  std::lock_guard<std::mutex> lock(mutex_);
  contexts_.emplace_back(case_name, repetition);
}

void TraceRecorder::record(const char* name, Clock::time_point start, Clock::time_point end, std::int64_t step) {
  add({name, since_epoch_ns(start), since_epoch_ns(end), static_cast<std::uint64_t>(pthread_self()), step, 0, rank_, false});
}

void TraceRecorder::record_async(const char* name, Clock::time_point start, Clock::time_point end, std::int64_t step) {
  add({name, since_epoch_ns(start), since_epoch_ns(end), static_cast<std::uint64_t>(pthread_self()), step, 0, rank_, true});
}

void TraceRecorder::add(Event e) {
  std::lock_guard<std::mutex> lock(mutex_);
  e.context = static_cast<int>(contexts_.size()) - 1;
  events_.push_back(std::move(e));
}

std::size_t TraceRecorder::size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return events_.size();
}

std::string TraceRecorder::encode() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::uint64_t> threads;
  std::ostringstream out;
  for (const auto& e : events_) {
    auto it = std::find(threads.begin(), threads.end(), e.thread);
    if (it == threads.end()) it = threads.insert(threads.end(), e.thread);
    out << e.name << ' ' << e.start_ns << ' ' << e.end_ns << ' ' << (it - threads.begin()) << ' ' << e.step << ' '
        << (e.async ? 'b' : 'X') << '\n';
  }
  return out.str();
}

void TraceRecorder::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  events_.clear();
}

void TraceRecorder::merge(const std::string& encoded, int rank, const std::string& process_label) {
  std::vector<Event> decoded;
  std::istringstream lines(encoded);
  std::string line;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    Event e{};
    std::uint64_t thread = 0;
    char kind = 0;
    if (!(in >> e.name >> e.start_ns >> e.end_ns >> thread >> e.step >> kind) || e.end_ns < e.start_ns ||
        (kind != 'X' && kind != 'b')) {
      throw std::runtime_error("malformed trace events from " + process_label + ": '" + line + "'");
    }
    e.thread = thread;  // the process's own thread number until it is given a row below
    e.async = kind == 'b';
    e.rank = rank;
    decoded.push_back(std::move(e));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  const int context = static_cast<int>(contexts_.size()) - 1;
  for (auto& e : decoded) {
    const std::string row = process_label + (e.thread == 0 ? "" : " thread " + std::to_string(e.thread));
    auto [it, added] = merged_rows_.emplace(row, kMergedRowTag | merged_rows_.size());
    if (added) row_names_[it->second] = row;
    e.thread = it->second;
    e.context = context;
    events_.push_back(std::move(e));
  }
}

std::string TraceRecorder::to_json(int rank) const {
  using nlohmann::json;
  std::lock_guard<std::mutex> lock(mutex_);
  json events = json::array();
  std::vector<std::uint64_t> threads;
  int highest_rank = std::max(rank_, world_size_ - 1);
  int async_id = 0;
  for (const auto& e : events_) {
    highest_rank = std::max(highest_rank, e.rank);
    if (e.rank != rank) continue;
    auto it = std::find(threads.begin(), threads.end(), e.thread);
    if (it == threads.end()) it = threads.insert(threads.end(), e.thread);
    const auto& [case_name, repetition] = contexts_[static_cast<size_t>(e.context)];
    const json args = {{"case", case_name}, {"repetition", repetition}, {"step", e.step}};
    const int tid = static_cast<int>(it - threads.begin());
    const std::int64_t start_us = (e.start_ns + wall_offset_ns_) / 1000;
    const std::int64_t end_us = start_us + (e.end_ns - e.start_ns) / 1000;
    if (e.async) {
      ++async_id;
      events.push_back({{"name", e.name}, {"cat", "comm"}, {"ph", "b"}, {"id", async_id}, {"ts", start_us},
                        {"pid", rank}, {"tid", tid}, {"args", args}});
      events.push_back({{"name", e.name}, {"cat", "comm"}, {"ph", "e"}, {"id", async_id}, {"ts", end_us},
                        {"pid", rank}, {"tid", tid}});
      continue;
    }
    events.push_back({{"name", e.name},
                      {"cat", e.name == "step" ? "step" : "phase"},
                      {"ph", "X"},
                      {"ts", start_us},
                      {"dur", end_us - start_us},
                      {"pid", rank},
                      {"tid", tid},
                      {"args", args}});
  }
  events.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", rank},
                    {"args", {{"name", "ddpbench rank " + std::to_string(rank)}}}});
  for (std::size_t t = 0; t < threads.size(); ++t) {
    const auto name = row_names_.find(threads[t]);
    if (name == row_names_.end()) continue;
    events.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", rank}, {"tid", static_cast<int>(t)},
                      {"args", {{"name", name->second}}}});
  }
  return json{{"traceEvents", events},
              {"displayTimeUnit", "ms"},
              {"distributedInfo", {{"rank", rank}, {"world_size", highest_rank + 1}, {"backend", "ddpbench"}}}}
      .dump();
}

std::vector<std::string> TraceRecorder::write(const std::string& dir) const {
  std::set<int> ranks;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (const auto& e : events_) ranks.insert(e.rank);
  }
  ranks.erase(rank_);
  std::vector<std::string> paths;
  for (int rank : ranks) {
    const std::string path = dir + "/" + file_name(rank);
    write_file_atomically(path, to_json(rank));
    paths.push_back(path);
  }
  // This recorder's own file last, so that its presence says the others are complete.
  const std::string own = dir + "/" + file_name(rank_);
  write_file_atomically(own, to_json(rank_));
  paths.insert(paths.begin(), own);
  return paths;
}

}  // namespace ddpbench
