#include "run/fault_injection.h"

#include <cstdio>
#include <cstdlib>

#include "distributed/process_group.h"

namespace ddpbench {

bool should_hang(const std::string& case_name) {
  const char* target = std::getenv("DDPBENCH_FAULT_HANG");
  return target != nullptr && case_name == target;
}

void announce_injected_hang(const std::string& case_name) {
  std::fprintf(stderr, "ddpbench: injected fault: %s hangs now\n", case_name.c_str());
  std::fflush(stderr);
}

std::string rank_fault(const ProcessGroupContext* group, int repetition) {
  const char* spec = std::getenv("DDPBENCH_FAULT_RANK");
  if (group == nullptr || spec == nullptr) return {};
  const std::string s = spec;
  const auto colon = s.find(':');
  if (colon == std::string::npos || s.substr(0, colon) != std::to_string(group->rank())) return {};
  std::string fault = s.substr(colon + 1);
  const auto at = fault.find('@');
  if (at == std::string::npos) return fault;
  return fault.substr(at + 1) == std::to_string(repetition) ? fault.substr(0, at) : std::string();
}

}  // namespace ddpbench
