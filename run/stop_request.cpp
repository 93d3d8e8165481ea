#include "run/stop_request.h"

#include <atomic>
#include <mutex>

namespace ddpbench {
namespace {
std::atomic<bool> g_stop_requested{false};
std::mutex g_reason_mutex;
std::string g_reason;  // the first reason given; none: a signal
}  // namespace

void request_stop() { g_stop_requested.store(true); }
bool stop_requested() { return g_stop_requested.load(); }

void request_stop_because(const std::string& why) {
  {
    std::lock_guard<std::mutex> lock(g_reason_mutex);
    if (g_reason.empty()) g_reason = why;
  }
  request_stop();
}

std::string stop_reason() {
  std::lock_guard<std::mutex> lock(g_reason_mutex);
  return g_reason.empty() ? "interrupted by a signal" : g_reason;
}

}  // namespace ddpbench
