#include "base/child_process.h"

#include "base/fork_server.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <stdexcept>

extern char** environ;

#include <fstream>

namespace ddpbench {

pid_t spawn_child(const ChildSpawn& spawn) {
  // Forked from the server's ready process where one stands for this executable (fork_server.h).
  if (fork_server::serves(spawn.executable)) {
    if (auto pid = fork_server::spawn({spawn.args, spawn.environment, spawn.process_group, spawn.descriptors})) return *pid;
  }
  // argv and environment are built before the spawn: nothing of ours runs in the child.
  std::vector<std::string> argv_strings{spawn.executable};
  argv_strings.insert(argv_strings.end(), spawn.args.begin(), spawn.args.end());
  std::vector<char*> argv;
  for (auto& a : argv_strings) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_strings = spawn.environment;
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  for (const auto& [ours, theirs] : spawn.descriptors) posix_spawn_file_actions_adddup2(&actions, ours, theirs);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGINT);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGPIPE);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, spawn.process_group);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETSIGMASK);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error(std::strerror(rc));
  return pid;
}

std::vector<std::string> inherited_environment(const std::function<bool(const std::string&)>& drop) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!drop(*e)) env.emplace_back(*e);
  }
  return env;
}

std::string signal_text(int signal) {
  const char* abbrev = sigabbrev_np(signal);
  return std::to_string(signal) + " (" + (abbrev ? std::string("SIG") + abbrev : "unknown") + ")";
}

std::string exit_text(int status) {
  if (WIFSIGNALED(status)) return "was killed by signal " + signal_text(WTERMSIG(status));
  if (WIFEXITED(status)) return "exited with code " + std::to_string(WEXITSTATUS(status));
  return "ended";
}

namespace {

// The number after `key` in a file of "key value" lines, when there is one.
std::optional<long long> counter_in(const std::string& path, const std::string& key) {
  std::ifstream in(path);
  std::string name;
  long long value = 0;
  while (in >> name >> value) {
    if (name == key) return value;
  }
  return std::nullopt;
}

// This process's cgroup path in the hierarchy named by `controller` ("" for cgroup v2's).
std::optional<std::string> own_cgroup(const std::string& controller) {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    const auto first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    if (controller.empty() ? line.rfind("0::", 0) == 0
                           : ("," + controllers + ",").find("," + controller + ",") != std::string::npos) {
      return line.substr(second + 1);
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<long long> oom_kill_count() {
  if (const auto v2 = own_cgroup("")) {
    if (auto n = counter_in("/sys/fs/cgroup" + *v2 + "/memory.events", "oom_kill")) return n;
    if (auto n = counter_in("/sys/fs/cgroup/unified" + *v2 + "/memory.events", "oom_kill")) return n;
  }
  if (const auto v1 = own_cgroup("memory")) {
    if (auto n = counter_in("/sys/fs/cgroup/memory" + *v1 + "/memory.oom_control", "oom_kill")) return n;
  }
  return counter_in("/proc/vmstat", "oom_kill");
}

std::string exit_text(int status, std::optional<long long> oom_kills_before, std::optional<long long> oom_kills_now) {
  std::string text = exit_text(status);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) return text;
  if (!oom_kills_before || !oom_kills_now) {
    return text + ": the kernel's OOM killer, or a kill from outside (this machine's OOM-kill count cannot be read)";
  }
  if (*oom_kills_now > *oom_kills_before) {
    return text + " by the kernel's out-of-memory killer (its OOM-kill count rose by " +
           std::to_string(*oom_kills_now - *oom_kills_before) + ")";
  }
  return text + ", not by the kernel's OOM killer (its OOM-kill count did not rise)";
}

}  // namespace ddpbench
