#pragma once
#include <sstream>
#include <stdexcept>
#include <string>

namespace ddpbench {

// A bad flag, value, combination or path given by the user. The message names it; main() turns this
// into one line on stderr and exit code 2, before anything is written.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A case that could not complete (a strategy's failure, a dead rank, a timeout). The runner records it
// in the case and goes on with the others.
class CaseFailure : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// What a one-line report shows of an error: its first line (library errors carry tracebacks).
inline std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

// The line of an error that says what went wrong: its first, except for the TorchScript
// interpreter's, which open with "The following operation failed..." and a traceback, and end with
// the Python-style error line.
inline std::string telling_line(const std::string& text) {
  if (text.rfind("The following operation failed", 0) != 0) return first_line(text);
  std::string last, line;
  std::istringstream in(text);
  while (std::getline(in, line)) {
    if (line.find_first_not_of(" \t") != std::string::npos) last = line;
  }
  return last;
}

// The run was asked to stop (SIGINT/SIGTERM/SIGHUP); what was measured is kept.
class RunInterrupted : public std::runtime_error {
 public:
  RunInterrupted() : std::runtime_error("interrupted") {}
};

}  // namespace ddpbench
