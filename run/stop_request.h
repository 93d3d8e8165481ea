#pragma once
// A run asked to stop (SIGINT, SIGTERM, SIGHUP) ends at the next step boundary, keeping what it measured.
// The signal handler sets the flag; every pass over a case checks it between steps.
#include <string>

#include "base/errors.h"

namespace ddpbench {

// Async-signal-safe: only stores an atomic flag.
void request_stop();
bool stop_requested();
// Not from a signal handler: a stop for a reason of the program's own (an output it cannot write),
// which the run's interruption names in place of "interrupted by a signal".
void request_stop_because(const std::string& why);
std::string stop_reason();

// Thrown at a step boundary after request_stop(); ends the run, keeping what was measured.
using StopRequested = RunInterrupted;

}  // namespace ddpbench
