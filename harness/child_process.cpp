#include "harness/child_process.h"

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstring>
#include <stdexcept>

extern char** environ;

namespace ddpbench {

pid_t spawn_child(const ChildSpawn& spawn) {
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

}  // namespace ddpbench
