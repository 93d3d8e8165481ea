#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>
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

TEST(OutputClaims, TwoFilesInADirectoryDeeperThanPathMaxAreTwoOutputs) {
  // A canonical path longer than PATH_MAX cannot be had (realpath fails), so files there are
  // told apart by their directory's device and inode, reached by a short relative path.
  ScratchDir dir;
  const int start = ::open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  ASSERT_GE(start, 0);
  ASSERT_EQ(::chdir(dir.path().c_str()), 0);
  const std::string component(200, 'd');
  int depth = 0;
  for (; depth * (component.size() + 1) <= PATH_MAX + 200; ++depth) {
    ASSERT_EQ(::mkdir(component.c_str(), 0755), 0);
    ASSERT_EQ(::chdir(component.c_str()), 0);
  }
  char probe[PATH_MAX];
  EXPECT_EQ(::realpath(".", probe), nullptr) << "not deeper than PATH_MAX";
  {
    OutputClaims claims;
    EXPECT_EQ(refusal(claims, "--json", "a.json"), "");
    EXPECT_EQ(refusal(claims, "--checkpoint", "b.pt"), "") << "two files of one deep directory are one output";
    EXPECT_NE(refusal(claims, "--trace", "./a.json").find("--json writes too"), std::string::npos);
  }
  for (int i = 0; i < depth; ++i) {  // back out and remove it: too deep for a path-based removal
    ASSERT_EQ(::chdir(".."), 0);
    ASSERT_EQ(::rmdir(component.c_str()), 0);
  }
  ASSERT_EQ(::fchdir(start), 0);
  ::close(start);
}

TEST(OutputClaims, OneDirectoryThroughABindMountIsOneOutput) {
  // In a child with a private mount namespace (root only): DIR/bound is DIR/real bind-mounted. The
  // same file under either name is one output of one run, and a second run may not write it.
  ScratchDir dir;
  ASSERT_EQ(::mkdir(dir.file("real").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir(dir.file("bound").c_str(), 0755), 0);
  int report[2];
  ASSERT_EQ(::pipe(report), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    std::string out;
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount(dir.file("real").c_str(), dir.file("bound").c_str(), nullptr, MS_BIND, nullptr) != 0) {
      out = std::string("skip: no private mount namespace here: ") + std::strerror(errno);
    } else {
      OutputClaims claims;
      out = refusal(claims, "--json", dir.file("real/r.json"));
      out += "|" + refusal(claims, "--checkpoint", dir.file("bound/r.json"));
      OutputClaims other_run;
      out += "|" + refusal(other_run, "--json", dir.file("bound/r.json"));
      ::umount(dir.file("bound").c_str());
    }
    (void)!::write(report[1], out.data(), out.size());
    ::_exit(0);
  }
  ::close(report[1]);
  std::string out;
  char buffer[512];
  for (ssize_t n; (n = ::read(report[0], buffer, sizeof(buffer))) > 0;) out.append(buffer, static_cast<size_t>(n));
  ::close(report[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  if (out.rfind("skip:", 0) == 0) GTEST_SKIP() << out;
  const auto first = out.find('|'), second = out.find('|', first + 1);
  ASSERT_NE(second, std::string::npos) << out;
  EXPECT_EQ(out.substr(0, first), "");
  EXPECT_NE(out.substr(first + 1, second - first - 1).find("--json writes too"), std::string::npos) << out;
  EXPECT_NE(out.substr(second + 1).find("another ddpbench run"), std::string::npos) << out;
}

// ---- end to end: the ddpbench executable refuses what it cannot write -----------------------

using nlohmann::json;
using testing::path_exists;
using testing::read_text;
using testing::run_process;
using testing::start_long_run;
using testing::tiny_run;

TEST(OutputPaths, UnwritableJsonPathExitsTwo) {
  ScratchDir dir;
  for (const std::string& path : {dir.file("no/such/dir/r.json"), dir.path(), std::string("/proc/r.json")}) {
    const auto r = run_process(tiny_run(path));
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.err;
    EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
  }
}

TEST(OutputPaths, TraceMakesItsDirectory) {
  ScratchDir dir;
  const auto traces = dir.file("new/deeper");
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--trace", traces}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(directory_entries(traces), std::vector<std::string>{"ddpbench-rank0.json"});
  // A refused run makes nothing: the directory is the last thing checked.
  const auto refused = run_process(tiny_run(dir.file("r.json"), {"--strategy", "zero3", "--trace", dir.file("never")}));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_FALSE(path_exists(dir.file("never")));
}

// Bad output paths are found before anything is measured: exit 2, one line naming the flag,
// nothing measured (no case in the table), and what was at the path is as it was.
void expect_refused_before_measuring(const testing::ProcessResult& r, const std::string& flag) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(flag + ": "), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("/world:"), std::string::npos) << "measured before refusing:\n" << r.out;
}

TEST(OutputPaths, OutputsThatAreNotWritableRegularFilesAreRefusedUntouched) {
  ScratchDir dir;
  const auto fifo = dir.file("fifo"), link = dir.file("link"), linked = dir.file("linked.json");
  const auto read_only = dir.file("read-only.json"), device = dir.file("null");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::ofstream(linked) << "the link's target";
  ASSERT_EQ(::symlink("linked.json", link.c_str()), 0);
  std::ofstream(read_only) << "keep me";
  ASSERT_EQ(::chmod(read_only.c_str(), 0444), 0);
  std::vector<std::string> refused{fifo, link, read_only, "-", dir.file(std::string(245, 'x') + ".json")};
  if (::geteuid() == 0 && ::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) refused.push_back(device);
  for (const auto& path : refused) {
    SCOPED_TRACE(path);
    expect_refused_before_measuring(run_process(tiny_run(path, {"--strategy", "single"})), "--json");
  }
  struct stat st{};
  EXPECT_TRUE(::lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode));
  EXPECT_TRUE(::lstat(link.c_str(), &st) == 0 && S_ISLNK(st.st_mode));
  EXPECT_EQ(read_text(linked), "the link's target");
  EXPECT_EQ(read_text(read_only), "keep me");
  if (refused.back() == device) {
    EXPECT_TRUE(::lstat(device.c_str(), &st) == 0 && S_ISCHR(st.st_mode));
  }
}

TEST(OutputPaths, CheckpointPathsAreCheckedBeforeMeasuring) {
  ScratchDir dir;
  for (const auto& path : {dir.path(), dir.file("missing/model.pt")}) {
    SCOPED_TRACE(path);
    const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "ddp", "--checkpoint", path}));
    expect_refused_before_measuring(r, "--checkpoint");
  }
  EXPECT_FALSE(path_exists(dir.file("r.json")));
}

TEST(OutputPaths, TwoOutputsOfOneRunMayNotBeOneFile) {
  ScratchDir dir;
  const auto same = dir.file("same.json");
  const auto one_file =
      run_process(tiny_run(same, {"--strategy", "single,ddp", "--checkpoint", dir.file("./same.json")}));
  expect_refused_before_measuring(one_file, "--checkpoint");
  // The trace of rank 0 is DIR/ddpbench-rank0.json; rank 1's too when ddp runs on two ranks.
  expect_refused_before_measuring(
      run_process(tiny_run(dir.file("ddpbench-rank1.json"), {"--strategy", "single,ddp", "--trace", dir.path()})),
      "--trace");
  EXPECT_TRUE(directory_entries(dir.path()).empty());
}

TEST(OutputPaths, AReplacedResultsFileKeepsItsMode) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  std::ofstream(path) << "previous results";
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  const auto r = run_process(tiny_run(path, {"--strategy", "single"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(read_text(path).find("\"benchmarks\""), std::string::npos);
}

// `args` run by a shell that first sets a file-size limit of `blocks` (ulimit -f; /bin/sh counts
// 512-byte blocks): the limit a user's shell or a CI runner may set, applied to that one child only.
// The tests take 4 blocks (2 KiB): the captured table (under 1 KiB) fits, which a full standard
// output would report too, and the JSON (18 KiB) and a trace file (72 KiB) do not.
std::vector<std::string> under_file_size_limit(int blocks, const std::vector<std::string>& args) {
  std::vector<std::string> shell = {"/bin/sh", "-c", "ulimit -f " + std::to_string(blocks) + " && exec \"$@\"", "sh"};
  shell.insert(shell.end(), args.begin(), args.end());
  return shell;
}

// Past a file-size limit a write fails as on a full disk: one line naming the flag and the file,
// exit 1 and no SIGXFSZ death; the table still shows what was measured; the earlier results file
// is whole and nothing half-written is left beside it.
TEST(OutputPaths, AFileSizeLimitOnJsonIsOneLineAndKeepsTheEarlierFile) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  std::ofstream(path) << "earlier results";
  const auto r = run_process(under_file_size_limit(4, tiny_run(path, {"--strategy", "single"})));
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--json: cannot write '" + path + "': File too large"), std::string::npos) << r.err;
  EXPECT_NE(r.out.find("mlp/single/world:1"), std::string::npos) << "no table:\n" << r.out;
  EXPECT_EQ(read_text(path), "earlier results");
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"r.json"});
}

// Issue 43 item 11: a standard output that is full or closed loses the table, which is said in
// one line, and the exit code is not 0; the JSON still holds the run.
TEST(OutputPaths, AStandardOutputThatCannotBeWrittenIsOneLineAndNotExitZero) {
  for (const std::string redirect : {">/dev/full", ">&-"}) {
    SCOPED_TRACE(redirect);
    ScratchDir dir;
    const auto path = dir.file("r.json");
    std::vector<std::string> shell = {"/bin/sh", "-c", "exec \"$@\" " + redirect, "sh"};
    const auto run = tiny_run(path, {"--strategy", "single"});
    shell.insert(shell.end(), run.begin(), run.end());
    const auto r = run_process(shell);
    EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal;
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("standard output could not be written"), std::string::npos) << r.err;
    EXPECT_NE(read_text(path).find("mlp/single/world:1"), std::string::npos);
  }
}

TEST(OutputPaths, AFileSizeLimitOnTheTraceIsOneLineAfterTheMeasuredTable) {
  ScratchDir dir;
  const auto traces = dir.file("traces");
  const auto r = run_process(under_file_size_limit(
      4, testing::ddpbench_args({"--device", "cpu", "--threads", "1", "--batch", "8", "--dataset-size", "16", "--steps",
                                 "20", "--warmup", "1", "--repetitions", "2", "--no-json", "--strategy", "ddp",
                                 "--world-size", "2", "--trace", traces})));
  EXPECT_EQ(r.signal, 0) << "killed by signal " << r.signal;
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--trace: cannot write"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  const auto row = r.out.find("\nmlp/ddp/world:2 ");
  ASSERT_NE(row, std::string::npos) << "no table:\n" << r.out;
  EXPECT_EQ(r.out.substr(row + 1, r.out.find('\n', row + 1) - row - 1).find(" ok "), std::string("mlp/ddp/world:2 ").size())
      << "the measured case is not ok in the table:\n" << r.out;
  EXPECT_EQ(r.out.find("trace:"), std::string::npos) << r.out;
  for (const auto& name : directory_entries(traces)) {
    EXPECT_NE(read_text(traces + "/" + name).find("traceEvents"), std::string::npos) << name << " is not whole";
  }
}

TEST(OutputPaths, ASecondLiveRunMayNotWriteTheSameJson) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  const pid_t first = start_long_run(path);
  for (int i = 0; i < 600 && !path_exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto second = run_process(tiny_run(dir.file("./results.json"), {"--strategy", "single"}));
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  expect_refused_before_measuring(second, "--json");
  EXPECT_NE(second.err.find("another ddpbench run"), std::string::npos) << second.err;
  // The first run's lock went with it: nothing stays behind to block the next run.
  const auto third = run_process(tiny_run(path, {"--strategy", "single"}));
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"results.json"});
}

}  // namespace
}  // namespace ddpbench
