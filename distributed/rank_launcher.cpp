#include "distributed/rank_launcher.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <nlohmann/json.hpp>
#include <dirent.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "compat/c10d_compat.h"
#include "base/child_process.h"
#include "base/errors.h"

namespace ddpbench {
namespace {

using Clock = std::chrono::steady_clock;

const char* kind_name(RankFailureReport::Kind kind) {
  switch (kind) {
    case RankFailureReport::Kind::Comm: return "comm";
    case RankFailureReport::Kind::Hang: return "hang";
    case RankFailureReport::Kind::Usage: return "usage";
    case RankFailureReport::Kind::Case: break;
  }
  return "case";
}

std::string seconds_text(std::chrono::milliseconds t) {
  std::ostringstream out;
  out << static_cast<double>(t.count()) / 1000.0;
  return out.str();
}

// Variables this launcher sets for its ranks; inherited copies are dropped so they cannot disagree.
bool is_launch_variable(const std::string& entry) {
  static const char* names[] = {"RANK=", "WORLD_SIZE=", "LOCAL_RANK=", "LOCAL_WORLD_SIZE=", "MASTER_ADDR=",
                                "MASTER_PORT=", "DDPBENCH_LAUNCHER_STORE=", "DDPBENCH_STORE_PREFIX=",
                                "DDPBENCH_LAUNCHER_PID=", "DDPBENCH_RANK_TASK=", "SLURM_PROCID="};
  for (const char* n : names) {
    if (entry.rfind(n, 0) == 0) return true;
  }
  return false;
}

struct Child {
  pid_t pid = -1;
  bool running = false;
  int status = 0;          // waitpid status once exited
  bool killed_by_us = false;
};

// Descriptors this process has open now (each entry of /proc/self/fd but the one reading it).
rlim_t open_descriptors() {
  rlim_t n = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (const dirent* e = ::readdir(dir))
      if (e->d_name[0] != '.') ++n;
    ::closedir(dir);
  }
  return n > 0 ? n - 1 : 0;
}

// c10d's store server accepts the ranks' connections on a thread of its own, and at the open-file
// limit that accept throws there, where nothing can catch it (std::terminate: exit 134, no line).
// So the limit is checked before anything starts: raised towards the hard limit when the soft one
// is too low, and refused in one line when the hard one is. Measured on the CPU path: the launcher
// holds about 14 + 2 per rank, each rank about 13 + 1 per peer; 16 + 4 per rank above what is open
// now covers both with room.
void ensure_descriptors_for(int world_size) {
  const rlim_t needed = open_descriptors() + 16 + 4 * static_cast<rlim_t>(world_size);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY || limit.rlim_cur >= needed) return;
  if (limit.rlim_max == RLIM_INFINITY || limit.rlim_max >= needed) {
    rlimit raised = limit;
    raised.rlim_cur = std::max<rlim_t>(needed, std::min<rlim_t>(1024, limit.rlim_max));
    if (::setrlimit(RLIMIT_NOFILE, &raised) == 0) return;
  }
  throw std::runtime_error("the open-file limit (ulimit -n " + std::to_string(limit.rlim_cur) + ") is too low for " +
                           std::to_string(world_size) + " rank processes: they need about " + std::to_string(needed) +
                           " descriptors; raise it (ulimit -n " + std::to_string(std::max<rlim_t>(needed, 1024)) + ")");
}

}  // namespace

std::string encode_failure(const RankFailureReport& report) {
  return nlohmann::json{{"kind", kind_name(report.kind)}, {"reason", report.reason}}.dump();
}

RankFailureReport decode_failure(const std::string& text) {
  RankFailureReport r;
  try {
    const auto j = nlohmann::json::parse(text);
    const auto kind = j.at("kind").get<std::string>();
    r.kind = kind == "comm"    ? RankFailureReport::Kind::Comm
             : kind == "hang"  ? RankFailureReport::Kind::Hang
             : kind == "usage" ? RankFailureReport::Kind::Usage
                               : RankFailureReport::Kind::Case;
    r.reason = j.at("reason").get<std::string>();
  } catch (const std::exception&) {
    r.reason = text;
  }
  return r;
}

struct RankLauncher::Store {
  c10::intrusive_ptr<c10d::TCPStore> tcp;
};

RankLauncher::RankLauncher(RankLaunchOptions options) : options_(std::move(options)), store_(std::make_unique<Store>()) {
  ensure_descriptors_for(options_.world_size);
  compat::TcpStoreSettings settings;
  settings.port = 0;  // a free port, chosen by the kernel: no race with other runs
  settings.is_server = true;
  settings.timeout = options_.timeout;
  store_->tcp = compat::make_tcp_store("127.0.0.1", settings);
}

RankLauncher::~RankLauncher() = default;

RankTaskOutput RankLauncher::run(const std::string& task, const std::function<void(std::int64_t)>& on_steps,
                              const std::function<bool()>& stop_requested) {
  const std::string prefix = "task" + std::to_string(next_task_++);
  const auto oom_kills_before = oom_kill_count();  // whether a rank killed by SIGKILL was the OOM killer's
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix, store_->tcp);
  const int n = options_.world_size;

  std::vector<std::string> base_env = inherited_environment(is_launch_variable);
  base_env.push_back("WORLD_SIZE=" + std::to_string(n));
  base_env.push_back("LOCAL_WORLD_SIZE=" + std::to_string(n));
  base_env.push_back("MASTER_ADDR=127.0.0.1");
  base_env.push_back("MASTER_PORT=" + std::to_string(store_->tcp->getPort()));
  base_env.push_back("DDPBENCH_LAUNCHER_STORE=1");
  base_env.push_back("DDPBENCH_STORE_PREFIX=" + prefix);
  base_env.push_back("DDPBENCH_LAUNCHER_PID=" + std::to_string(getpid()));
  base_env.push_back("DDPBENCH_RANK_TASK=" + task);

  std::vector<Child> children(static_cast<size_t>(n));
  pid_t group = 0;
  auto kill_all = [&](int sig) {
    for (auto& c : children) {
      if (c.running) {
        c.killed_by_us = true;
        kill(c.pid, sig);
      }
    }
  };
  auto reap = [&](bool block) {
    for (auto& c : children) {
      if (!c.running) continue;
      int status = 0;
      const pid_t r = waitpid(c.pid, &status, block ? 0 : WNOHANG);
      if (r == c.pid) {
        c.running = false;
        c.status = status;
      }
    }
  };
  auto running_count = [&] {
    int k = 0;
    for (const auto& c : children) k += c.running ? 1 : 0;
    return k;
  };
  // Ends every rank still running: SIGTERM, a moment, then SIGKILL; reaps them all.
  auto end_all = [&] {
    kill_all(SIGTERM);
    const auto deadline = Clock::now() + std::chrono::seconds(1);
    while (running_count() > 0 && Clock::now() < deadline) {
      reap(false);
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    kill_all(SIGKILL);
    reap(true);
  };

  for (int r = 0; r < n; ++r) {
    // The ranks share a process group of their own (the first rank's).
    ChildSpawn spawn{options_.executable, options_.args, base_env, group, {}};
    spawn.environment.push_back("RANK=" + std::to_string(r));
    spawn.environment.push_back("LOCAL_RANK=" + std::to_string(r));
    pid_t pid = -1;
    try {
      pid = spawn_child(spawn);
    } catch (const std::exception& e) {
      end_all();
      throw CaseFailure("cannot start rank " + std::to_string(r) + " (" + options_.executable + "): " + e.what());
    }
    if (group == 0) group = pid;
    children[static_cast<size_t>(r)] = Child{pid, true, 0, false};
  }

  const auto timeout = options_.timeout;
  // After the first rank fails, the others get this long to fail on their own (they see the broken
  // collective) before the ones still running are declared hung and killed.
  const auto grace = std::chrono::milliseconds(2000);
  std::optional<Clock::time_point> first_failure;
  std::int64_t steps_seen = 0;
  auto last_progress = Clock::now();

  auto report_of = [&](int r) -> std::optional<RankFailureReport> {
    const std::string key = task_keys::error(r);
    if (!store->check({key})) return std::nullopt;
    const auto bytes = store->get(key);
    return decode_failure(std::string(bytes.begin(), bytes.end()));
  };

  for (;;) {
    reap(false);
    if (stop_requested()) {
      end_all();
      throw RunInterrupted();
    }
    if (store->check({task_keys::kSteps})) {
      const std::int64_t steps = store->add(task_keys::kSteps, 0);
      if (steps != steps_seen) {
        steps_seen = steps;
        last_progress = Clock::now();
      }
    }
    on_steps(steps_seen);  // every poll: while the ranks live, hangs are this loop's to judge
    bool any_failed = false;
    for (const auto& c : children) {
      if (!c.running && !(WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)) any_failed = true;
    }
    if (!any_failed && running_count() == 0) {
      if (!store->check({task_keys::kResult})) throw CaseFailure("rank 0 exited without a result");
      RankTaskOutput out;
      const auto bytes = store->get(task_keys::kResult);
      out.result.assign(bytes.begin(), bytes.end());
      for (int r = 0; r < n; ++r) {
        std::string events;
        if (store->check({task_keys::trace(r)})) {
          const auto trace = store->get(task_keys::trace(r));
          events.assign(trace.begin(), trace.end());
        }
        out.traces.push_back(std::move(events));
      }
      return out;
    }
    if (any_failed && !first_failure) first_failure = Clock::now();
    bool signalled = false;
    for (const auto& c : children) signalled = signalled || (!c.running && WIFSIGNALED(c.status) && !c.killed_by_us);
    const bool grace_over = first_failure && Clock::now() - *first_failure > grace;
    const bool stalled = Clock::now() - last_progress > 2 * timeout + std::chrono::seconds(30);
    if ((any_failed && (running_count() == 0 || signalled || grace_over)) || stalled) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // Diagnose before ending the rest, so "still running" means "hung", not "killed by us".
  std::vector<int> hung;
  for (int r = 0; r < n; ++r) {
    if (children[static_cast<size_t>(r)].running) hung.push_back(r);
  }
  const bool stalled = !first_failure;
  end_all();

  std::vector<std::string> lines;
  auto rank_text = [](int r) { return "rank " + std::to_string(r); };
  // 1. a rank killed by a signal; 2. a rank's own failure (not a broken collective); 3. hung
  // ranks; 4. broken collectives alone.
  for (int r = 0; r < n; ++r) {
    const auto& c = children[static_cast<size_t>(r)];
    if (WIFSIGNALED(c.status) && !c.killed_by_us) {
      throw CaseFailure(rank_text(r) + " " + exit_text(c.status, oom_kills_before, oom_kill_count()));
    }
  }
  std::optional<std::string> comm_reason;
  for (int r = 0; r < n; ++r) {
    const auto& c = children[static_cast<size_t>(r)];
    if (c.killed_by_us || (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0)) continue;
    const auto report = report_of(r);
    if (!report) continue;
    if (report->kind == RankFailureReport::Kind::Hang) hung.push_back(r);
    if (report->kind == RankFailureReport::Kind::Case || report->kind == RankFailureReport::Kind::Usage) {
      throw CaseFailure(rank_text(r) + ": " + report->reason);
    }
    if (report->kind == RankFailureReport::Kind::Comm && !comm_reason) comm_reason = rank_text(r) + ": " + report->reason;
  }
  if (!hung.empty()) {
    std::string who;
    for (size_t i = 0; i < hung.size(); ++i) who += (i ? ", " : "") + std::to_string(hung[i]);
    throw CaseFailure(std::string(hung.size() == 1 ? "rank " : "ranks ") + who + " hung: no progress within " +
                      seconds_text(timeout) + " s (--timeout)" +
                      (stalled ? "" : "; the other ranks timed out waiting for it") + "; killed");
  }
  if (comm_reason) throw CaseFailure(*comm_reason);
  for (int r = 0; r < n; ++r) {
    const auto& c = children[static_cast<size_t>(r)];
    if (WIFEXITED(c.status) && WEXITSTATUS(c.status) != 0) {
      throw CaseFailure(rank_text(r) + " exited with code " + std::to_string(WEXITSTATUS(c.status)));
    }
  }
  throw CaseFailure("the ranks failed without saying why");
}

}  // namespace ddpbench
