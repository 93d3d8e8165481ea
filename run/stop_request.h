#pragma once
// A run asked to stop (SIGINT, SIGTERM) ends at the next step boundary, keeping what it measured.
// The signal handler sets the flag; every pass over a case checks it between steps.
#include "base/errors.h"

namespace ddpbench {

// Async-signal-safe: only stores an atomic flag.
void request_stop();
bool stop_requested();

// Thrown at a step boundary after request_stop(); ends the run, keeping what was measured.
using StopRequested = RunInterrupted;

}  // namespace ddpbench
