#pragma once
// ddpbench's own launcher for multi-process strategies: for each task (a case's parity check or one
// repetition) it starts N fresh rank processes of the ddpbench executable (spawn_child: forked from
// the fork server where one runs, else fork+exec; never a bare fork of this multi-threaded process), setting the same variables torchrun sets, and hosts
// their rendezvous store itself, as torchrun's agent does. It watches them: a rank killed by a
// signal, a rank that hangs, or one that fails ends the task within --timeout, every rank that is
// left is killed, and the failure names the rank. No rank outlives the launcher (PR_SET_PDEATHSIG).
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ddpbench {

// What a rank reports before it exits with a failure (store key error/<rank>).
struct RankFailureReport {
  enum class Kind { Comm, Hang, Case, Usage };
  Kind kind = Kind::Case;
  std::string reason;
};
std::string encode_failure(const RankFailureReport& report);
RankFailureReport decode_failure(const std::string& text);

// Keys of one task in the store, shared by the launcher and the ranks.
namespace task_keys {
inline const char* kSteps = "steps";    // rank 0 adds 1 after every step
inline const char* kResult = "result";  // rank 0's encoded result
inline std::string error(int rank) { return "error/" + std::to_string(rank); }
inline std::string trace(int rank) { return "trace/" + std::to_string(rank); }  // its encoded trace events
}  // namespace task_keys

// What a task's ranks leave behind when every one of them succeeded.
struct RankTaskOutput {
  std::string result;               // rank 0's encoded result
  std::vector<std::string> traces;  // each rank's encoded trace events (empty: none recorded)
};

struct RankLaunchOptions {
  std::string executable;         // the ddpbench binary
  std::vector<std::string> args;  // its arguments (without argv[0]) reproducing this run's options
  int world_size = 2;
  std::chrono::milliseconds timeout{300000};
};

class RankLauncher {
 public:
  explicit RankLauncher(RankLaunchOptions options);
  ~RankLauncher();
  RankLauncher(const RankLauncher&) = delete;
  RankLauncher& operator=(const RankLauncher&) = delete;

  // Runs `task` (DDPBENCH_RANK_TASK) on world_size fresh ranks and returns what they left.
  // `on_steps` hears rank 0's step count at every poll: the launcher, not the caller's step
  // watchdog, judges hangs while ranks run (a rank's broken collective fails within --timeout,
  // then the ranks still running get a short grace before they are declared hung). Throws CaseFailure naming the failed rank,
  // or RunInterrupted when `stop_requested` turns true (after ending every rank).
  RankTaskOutput run(const std::string& task, const std::function<void(std::int64_t)>& on_steps,
                  const std::function<bool()>& stop_requested);

  int world_size() const { return options_.world_size; }

 private:
  RankLaunchOptions options_;
  struct Store;  // the rendezvous store this launcher hosts
  std::unique_ptr<Store> store_;
  int next_task_ = 0;
};

}  // namespace ddpbench
