#pragma once
// Starting ddpbench's own child processes (ranks, Hogwild workers) without loading LibTorch again
// in each: a fork server, forked from ddpbench's main before anything else runs, holds a process
// whose libraries are loaded and whose static initializers have run (LibTorch's registers some
// thousands of operators: about 0.7 s of CPU a process on the 2-core VM, most of a short task's
// start), and forks each child from it. The child continues in main() with the arguments and
// environment it was asked for, as if exec'd: nothing of the launcher's later state (threads,
// sockets, tensors, a parsed command line) exists in the server, which stays single-threaded.
//
// The child is forked twice (server -> a short-lived middle process -> the child), and the
// launcher is marked PR_SET_CHILD_SUBREAPER, so the child is reparented to the launcher: its
// waitpid, kill and PR_SET_PDEATHSIG work on it as on a child it had started itself.
//
// It is used only where it can stand for fork+exec exactly: the executable asked for is this
// one, and main() was single-threaded when the server was forked. Otherwise, and with
// DDPBENCH_FORK_SERVER=0, spawn_child starts the child with posix_spawn as before.
// What differs from an exec'd child: /proc/PID/cmdline and /proc/PID/environ show the launcher's
// (the child's own environment is set with clearenv/putenv), and libraries that read the
// environment while loading (libgomp's OMP_*) read the launcher's, which the child inherits anyway;
// a forked child's peak RSS counts the library pages it touches, not those an exec'd child's
// relocation touched (mlp/ddp at world 2: 152 MB a rank forked, 230 MB exec'd); and it leaves
// with _exit after flushing its streams (cli/main.cpp), so no atexit handler runs in it.
#include <sys/types.h>

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddpbench::fork_server {

// Called first in main(). In the launcher it returns nothing (the server started, or not: see
// above); in a child the server forked it returns that child's argv, with its environment,
// descriptors, process group and signals already set. The server process never returns.
std::optional<std::vector<std::string>> start();

// Whether start() left a server running that can start `executable`.
bool serves(const std::string& executable);

struct Request {
  std::vector<std::string> args;                 // after argv[0]
  std::vector<std::string> environment;          // the child's whole environment
  pid_t process_group = 0;                       // 0: a new group, led by the child
  std::vector<std::pair<int, int>> descriptors;  // (ours, the child's), besides 0, 1 and 2
};

// Ends the server and waits for it: called as the launcher ends, so that no process of the run is
// left when it has gone (the server would otherwise end a moment later, on its socket's close).
void stop();

// The child's pid, or nothing when no server can start it (the caller falls back to posix_spawn).
// Throws std::runtime_error when the server could not fork.
std::optional<pid_t> spawn(const Request& request);

}  // namespace ddpbench::fork_server
