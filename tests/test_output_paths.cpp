#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <memory>
#include <string>

#include "base/errors.h"
#include "cli/output_paths.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using testing::directory_entries;
using testing::ScratchDir;

// The UsageError's message of claiming `path` as `flag`, or "" when the claim succeeds.
std::string refusal(OutputClaims& claims, const std::string& flag, const std::string& path) {
  try {
    claims.claim(flag, path);
    return {};
  } catch (const UsageError& e) {
    return e.what();
  }
}

TEST(OutputClaims, OneFileUnderTwoFlagsOrTwoSpellingsIsRefused) {
  ScratchDir dir;
  ASSERT_EQ(::mkdir(dir.file("sub").c_str(), 0755), 0);
  ASSERT_EQ(::symlink("sub", dir.file("alias").c_str()), 0);
  OutputClaims claims;
  EXPECT_EQ(refusal(claims, "--json", dir.file("sub/r.json")), "");
  for (const auto& same : {dir.file("sub/r.json"), dir.file("sub/./r.json"), dir.file("alias/r.json"),
                           dir.file("sub/../sub/r.json")}) {
    const std::string why = refusal(claims, "--checkpoint", same);
    EXPECT_NE(why.find("--checkpoint"), std::string::npos) << same << ": " << why;
    EXPECT_NE(why.find("--json writes too"), std::string::npos) << same << ": " << why;
  }
  EXPECT_EQ(refusal(claims, "--trace", dir.file("sub/ddpbench-rank0.json")), "") << "another file is another output";
}

TEST(OutputClaims, StandardOutputIsNoFileName) {
  OutputClaims claims;
  EXPECT_NE(refusal(claims, "--json", "-").find("--json: '-'"), std::string::npos);
}

TEST(OutputClaims, AClaimIsHeldUntilItsOwnerEndsAndLeavesNothingBehind) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  auto first = std::make_unique<OutputClaims>();
  first->claim("--json", path);
  OutputClaims second;
  EXPECT_NE(refusal(second, "--json", path).find("another ddpbench run"), std::string::npos);
  first.reset();
  EXPECT_EQ(refusal(second, "--json", path), "") << "the lock outlived its owner";
  EXPECT_TRUE(directory_entries(dir.path()).empty()) << "a claim wrote something";
}

TEST(OutputClaims, AKilledHolderLeavesNoLock) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t holder = ::fork();
  if (holder == 0) {
    OutputClaims claims;
    claims.claim("--json", path);
    const char byte = 1;
    (void)!::write(ready[1], &byte, 1);
    ::pause();
    ::_exit(0);
  }
  char byte = 0;
  ASSERT_EQ(::read(ready[0], &byte, 1), 1);
  OutputClaims mine;
  EXPECT_NE(refusal(mine, "--json", path).find("another ddpbench run"), std::string::npos)
      << "not held across processes";
  ::kill(holder, SIGKILL);
  ::waitpid(holder, nullptr, 0);
  EXPECT_EQ(refusal(mine, "--json", path), "") << "a killed holder kept its lock";
  ::close(ready[0]);
  ::close(ready[1]);
}

}  // namespace
}  // namespace ddpbench
