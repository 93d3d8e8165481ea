// The fork server (base/fork_server.h), through the real ddpbench executable: ranks forked from it
// are children of the launcher in process groups of their own, train exactly as exec'd ranks do,
// and nothing outlives a launcher killed with SIGKILL. DDPBENCH_FORK_SERVER=0 is the exec'd path.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::ScratchDir;

struct ProcStat {
  int parent = 0;
  int group = 0;
};

// /proc/PID/stat's parent and process group (the fields after the command's closing parenthesis).
std::optional<ProcStat> stat_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = text.rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::istringstream rest(text.substr(close + 1));
  std::string state;
  ProcStat s;
  if (!(rest >> state >> s.parent >> s.group)) return std::nullopt;
  return s;
}

std::string cmdline_of(int pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// ddpbench in the background with `env` added, stdout and stderr to /dev/null.
pid_t start_with(const std::vector<std::string>& args, const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> entries;
  for (char** e = environ; *e != nullptr; ++e) entries.emplace_back(*e);
  for (const auto& [name, value] : env) entries.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : entries) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::vector<char*> argv = testing::argv_of(args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::dup2(null, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return pid;
}

std::vector<std::string> ddp_run(const std::string& json_path, const std::string& timeout) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "2"}, {"--warmup", "1"}, {"--repetitions", "1"},
                                {"--batch", "8"}, {"--dataset-size", "16"}, {"--timeout", timeout}},
                               json_path, {"--strategy", "ddp", "--workload", "mlp", "--world-size", "2"});
}

// The same run with forked and with exec'd ranks: the same losses step by step and the same
// difference from single, to the bit (the server's process is the state a fresh exec reaches).
TEST(ForkServer, ForkedRanksTrainExactlyAsExecdRanks) {
  std::map<std::string, json> cases;
  for (const std::string setting : {"1", "0"}) {
    ScratchDir dir;
    const auto r = testing::run_process(ddp_run(dir.file("r.json"), "60"), 0, {{"DDPBENCH_FORK_SERVER", setting}});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const json doc = json::parse(testing::read_text(dir.file("r.json")));
    cases[setting] = (*testing::find_case(doc, "mlp/ddp/world:2"))["ddpbench"];
    ASSERT_EQ(cases[setting]["status"], "ok") << cases[setting]["reason"];
  }
  EXPECT_EQ(cases["1"]["loss_curve"], cases["0"]["loss_curve"]);
  EXPECT_EQ(cases["1"]["parity"]["max_rel_param_diff"], cases["0"]["parity"]["max_rel_param_diff"]);
  EXPECT_FALSE(cases["1"]["loss_curve"].empty());
}

// While a rank hangs, the launcher's children are looked at: two ranks in a process group of
// their own (a terminal's Ctrl-C stays the launcher's), whose command line is the launcher's when
// forked from the server (beside which the server is the one child in the launcher's group) and
// the rank's own --rank-options when exec'd. Killed with SIGKILL, the launcher takes every one of
// them with it.
TEST(ForkServer, RanksAreTheLaunchersChildrenAndDieWithIt) {
  for (const std::string setting : {"1", "0"}) {
    SCOPED_TRACE("DDPBENCH_FORK_SERVER=" + setting);
    ScratchDir dir;
    const auto marker = testing::unique_marker();
    const pid_t launcher = start_with(ddp_run(dir.file("r.json"), "60"),
                                      {{"DDPBENCH_FORK_SERVER", setting}, {"DDPBENCH_FAULT_RANK", "1:hang"}, marker});
    std::vector<int> ranks, beside;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (ranks.size() < 2 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ranks.clear();
      beside.clear();
      const auto own = stat_of(launcher);
      if (!own) continue;
      for (int pid : testing::processes_with(testing::marker_text(marker))) {
        const auto s = stat_of(pid);
        if (!s || s->parent != launcher) continue;
        (s->group == own->group ? beside : ranks).push_back(pid);
      }
    }
    ASSERT_EQ(ranks.size(), 2u) << "the launcher's ranks did not show up within 60 s";
    for (int rank : ranks) {
      const std::string cmdline = cmdline_of(rank);
      if (setting == "1") {
        EXPECT_EQ(cmdline, cmdline_of(launcher)) << "rank " << rank << " was not forked from the server";
      } else {
        EXPECT_NE(cmdline.find("--rank-options"), std::string::npos) << "rank " << rank << " was not exec'd";
      }
    }
    EXPECT_EQ(beside.size(), setting == "1" ? 1u : 0u) << "the server, and nothing else, beside the launcher";
    ::kill(launcher, SIGKILL);
    ::waitpid(launcher, nullptr, 0);
    std::vector<int> left = testing::processes_with(testing::marker_text(marker));
    for (int i = 0; i < 100 && !left.empty(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      left = testing::processes_with(testing::marker_text(marker));
    }
    EXPECT_TRUE(left.empty()) << left.size() << " process(es) outlived the killed launcher by 5 s";
  }
}

}  // namespace
}  // namespace ddpbench
