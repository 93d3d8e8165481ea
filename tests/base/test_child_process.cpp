// How ddpbench describes the end of its child processes (ranks, Hogwild workers), with real
// children: a SIGKILL is named the OOM killer's only when the kernel's count of OOM kills says so.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include "base/child_process.h"

namespace ddpbench {
namespace {

// The waitpid status of a real child that ends as `end` says.
int status_of_child(int signal, int code = 0) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (signal != 0) {
      ::signal(signal, SIG_DFL);  // a sanitizer's SIGSEGV handler would report and exit 1 instead
      ::raise(signal);
    }
    ::_exit(code);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  return status;
}

TEST(ExitText, SaysHowAChildEnded) {
  EXPECT_EQ(exit_text(status_of_child(0, 3)), "exited with code 3");
  EXPECT_EQ(exit_text(status_of_child(SIGTERM)), "was killed by signal 15 (SIGTERM)");
}

TEST(ExitText, ASigkillIsTheOomKillersOnlyWhenItsCountRose) {
  const int killed = status_of_child(SIGKILL);
  EXPECT_EQ(exit_text(killed, 4, 5),
            "was killed by signal 9 (SIGKILL) by the kernel's out-of-memory killer (its OOM-kill count rose by 1)");
  EXPECT_EQ(exit_text(killed, 4, 4),
            "was killed by signal 9 (SIGKILL), not by the kernel's OOM killer (its OOM-kill count did not rise)");
  EXPECT_NE(exit_text(killed, std::nullopt, 4).find("the kernel's OOM killer, or a kill from outside"),
            std::string::npos);
  // Other ends are told as they are, whatever the count did.
  EXPECT_EQ(exit_text(status_of_child(0, 1), 4, 5), "exited with code 1");
  EXPECT_EQ(exit_text(status_of_child(SIGSEGV), 4, 5), "was killed by signal 11 (SIGSEGV)");
}

TEST(OomKillCount, IsReadableOnLinuxAndDoesNotRiseForAKillByHand) {
  const auto before = oom_kill_count();
  ASSERT_TRUE(before.has_value()) << "no cgroup memory counter and no /proc/vmstat oom_kill";
  const int killed = status_of_child(SIGKILL);
  const auto after = oom_kill_count();
  EXPECT_EQ(exit_text(killed, before, after).find("out-of-memory killer"), std::string::npos);
}

}  // namespace
}  // namespace ddpbench
