#pragma once
// Faults injected for the tests only, through the environment, so that the watchdog and the
// launcher's fault handling are tested end to end with real processes. Unset, each costs one
// getenv per repetition.
#include <string>

namespace ddpbench {

class ProcessGroupContext;

// DDPBENCH_FAULT_HANG=<case name>: the first measured step of that case hangs.
bool should_hang(const std::string& case_name);
// One line on stderr as an injected hang begins, so that a test signals the stuck run then rather
// than after a guess at how long the cases before it take.
void announce_injected_hang(const std::string& case_name);

// DDPBENCH_FAULT_RANK=<rank>:kill or <rank>:hang, optionally @<repetition>: that rank of a
// multi-process case SIGKILLs itself, or stops making progress, at the first measured step of every
// repetition (or of that one). Returns "kill", "hang", or empty for this rank and repetition.
std::string rank_fault(const ProcessGroupContext* group, int repetition);

}  // namespace ddpbench
