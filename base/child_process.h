#pragma once
// Starting and describing ddpbench's own child processes (ranks, Hogwild workers): forked from the
// fork server when one stands for the executable (fork_server.h), else fork+exec through
// posix_spawn; either way nothing of this multi-threaded process runs in the child.
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddpbench {

struct ChildSpawn {
  std::string executable;
  std::vector<std::string> args;                // after argv[0], which is the executable
  std::vector<std::string> environment;         // the child's whole environment, NAME=VALUE
  pid_t process_group = 0;                      // 0: a new group, led by the child
  std::vector<std::pair<int, int>> descriptors; // (ours, the child's): dup2 in the child
};

// Starts the child with an empty signal mask and SIGINT, SIGTERM and SIGPIPE at their defaults
// (the ones ddpbench handles or ignores itself). Its own process group keeps a terminal's Ctrl-C
// for ddpbench, which then ends its children in order. Returns the pid; throws std::runtime_error
// with errno's text.
pid_t spawn_child(const ChildSpawn& spawn);

// This process's environment, less the entries `drop` selects.
std::vector<std::string> inherited_environment(const std::function<bool(const std::string&)>& drop);

// "9 (SIGKILL)".
std::string signal_text(int signal);
// How a child ended, from its waitpid status: "was killed by signal 9 (SIGKILL)", "exited with code 1".
std::string exit_text(int status);

// The kernel's count of out-of-memory kills that concern this process: its memory cgroup's (v2
// memory.events, v1 memory.oom_control), else the whole machine's (/proc/vmstat); none when
// nothing says. A SIGKILL alone does not tell the OOM killer from a kill by hand; this count does.
std::optional<long long> oom_kill_count();

// exit_text, and for a SIGKILL what the OOM-kill count says of it, from before the child ran to
// now: the kernel's out-of-memory killer (counted), or not (not counted), or cannot tell.
std::string exit_text(int status, std::optional<long long> oom_kills_before, std::optional<long long> oom_kills_now);

}  // namespace ddpbench
