// The launcher of self-launched rank processes (distributed/rank_launcher.h), end to end through the
// ddpbench executable: the limits of the machine it starts under.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using testing::run_process;

// `args` run by a shell that first sets the open-file limit (soft and hard) to `descriptors`.
std::vector<std::string> under_descriptor_limit(int descriptors, const std::vector<std::string>& args) {
  std::vector<std::string> shell = {"/bin/sh", "-c", "ulimit -n " + std::to_string(descriptors) + " && exec \"$@\"", "sh"};
  shell.insert(shell.end(), args.begin(), args.end());
  return shell;
}

const std::vector<std::string> kDdpRun = {"--device", "cpu", "--strategy", "ddp", "--world-size", "2", "--threads", "1",
                                          "--batch", "8", "--dataset-size", "16", "--steps", "1", "--warmup", "0",
                                          "--repetitions", "1", "--no-json"};

// c10d's store server throws at the limit on a thread of its own (std::terminate, exit 134, no
// line); the launcher checks the limit before any rank starts and says which it is.
TEST(RankLauncher, AnOpenFileLimitTooLowForTheRanksIsOneLineBeforeAnythingStarts) {
  const auto r = run_process(under_descriptor_limit(16, testing::ddpbench_args(kDdpRun)));
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal << ": " << r.err;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("open-file limit (ulimit -n 16)"), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("/world:"), std::string::npos) << "measured before refusing:\n" << r.out;
  EXPECT_LT(r.seconds, 30) << "not refused at once";
}

// A soft limit below what the ranks need, under the hard limit the tests run with (a thousand or more
// on any usual machine), is raised: the run goes.
TEST(RankLauncher, ALowSoftOpenFileLimitIsRaisedTowardsTheHardOne) {
  std::vector<std::string> shell = {"/bin/sh", "-c", "ulimit -Sn 16 && exec \"$@\"", "sh"};
  const auto args = testing::ddpbench_args(kDdpRun);
  shell.insert(shell.end(), args.begin(), args.end());
  const auto r = run_process(shell);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mlp/ddp/world:2"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ddpbench
