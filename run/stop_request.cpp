#include "run/stop_request.h"

#include <atomic>

namespace ddpbench {
namespace {
std::atomic<bool> g_stop_requested{false};
}  // namespace

void request_stop() { g_stop_requested.store(true); }
bool stop_requested() { return g_stop_requested.load(); }

}  // namespace ddpbench
