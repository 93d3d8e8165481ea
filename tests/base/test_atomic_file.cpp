#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <string>
#include <vector>

#include "base/atomic_file.h"
#include "base/errors.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using testing::directory_entries;
using testing::path_exists;
using testing::read_text;
using testing::ScratchDir;

TEST(AtomicFile, WritesAndReplacesWholeFiles) {
  ScratchDir dir;
  const auto path = dir.file("out.json");
  write_file_atomically(path, "first");
  EXPECT_EQ(read_text(path), "first");
  write_file_atomically(path, "second, longer");
  EXPECT_EQ(read_text(path), "second, longer");
  // Nothing but the target is left in the directory.
  EXPECT_EQ(directory_entries(dir.path()).size(), 1u);
}

TEST(AtomicFile, KillDuringWritesNeverLeavesATruncatedFile) {
  ScratchDir dir;
  const auto path = dir.file("out.json");
  // Two large, distinguishable versions; the child alternates between them until killed.
  const std::string a(8 << 20, 'a'), b(12 << 20, 'b');
  for (int attempt = 0; attempt < 5; ++attempt) {
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (int i = 0;; ++i) write_file_atomically(path, i % 2 ? b : a);
    }
    ::usleep(static_cast<useconds_t>(30000 + attempt * 17000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ASSERT_TRUE(WIFSIGNALED(status));
    for (const auto& name : directory_entries(dir.path())) {
      const std::string content = read_text(dir.file(name));
      EXPECT_TRUE(content == a || content == b) << name << " holds " << content.size() << " bytes: a partial write";
    }
  }
}

TEST(AtomicFile, CheckWritableOutputNamesTheFlag) {
  ScratchDir dir;
  try {
    check_writable_output("--json", dir.file("missing/out.json"));
    FAIL() << "a missing directory was accepted";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("--json"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("does not exist"), std::string::npos);
  }
  EXPECT_THROW(check_writable_output("--json", dir.path()), UsageError);  // a directory
  EXPECT_NO_THROW(check_writable_output("--json", dir.file("ok.json")));
  EXPECT_FALSE(path_exists(dir.file("ok.json")));  // checking creates nothing
}

// What lies at `path`, without following a link: S_IFREG, S_IFLNK, S_IFIFO, S_IFCHR... (0: nothing).
mode_t kind_of(const std::string& path) {
  struct stat st{};
  return ::lstat(path.c_str(), &st) == 0 ? (st.st_mode & S_IFMT) : 0;
}

mode_t permissions_of(const std::string& path) {
  struct stat st{};
  return ::stat(path.c_str(), &st) == 0 ? (st.st_mode & 07777) : 0;
}

// A FIFO, a symbolic link to a file, and (as root) a character device like /dev/null, in `dir`.
struct NonRegularTargets {
  explicit NonRegularTargets(const ScratchDir& dir)
      : fifo(dir.file("fifo")), link(dir.file("link")), linked(dir.file("linked.json")), device(dir.file("null")) {
    EXPECT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
    std::ofstream(linked) << "the link's target";
    EXPECT_EQ(::symlink("linked.json", link.c_str()), 0);
    have_device = ::geteuid() == 0 && ::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  }
  std::vector<std::string> paths() const {
    std::vector<std::string> p{fifo, link};
    if (have_device) p.push_back(device);
    return p;
  }
  void expect_untouched() const {
    EXPECT_EQ(kind_of(fifo), static_cast<mode_t>(S_IFIFO));
    EXPECT_EQ(kind_of(link), static_cast<mode_t>(S_IFLNK));
    EXPECT_EQ(read_text(linked), "the link's target");
    if (have_device) {
      EXPECT_EQ(kind_of(device), static_cast<mode_t>(S_IFCHR));
    }
  }
  std::string fifo, link, linked, device;
  bool have_device = false;
};

TEST(AtomicFile, ReplacesRegularFilesOnlyNeverALinkOrADevice) {
  ScratchDir dir;
  NonRegularTargets targets(dir);
  for (const auto& path : targets.paths()) {
    EXPECT_THROW(write_file_atomically(path, "results"), std::runtime_error) << path;
  }
  targets.expect_untouched();
  EXPECT_EQ(directory_entries(dir.path()).size(), targets.paths().size() + 1) << "a temporary file was left";
}

TEST(AtomicFile, AReplacedFileKeepsItsPermissionBits) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  std::ofstream(path) << "old";
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  write_file_atomically(path, "new");
  EXPECT_EQ(read_text(path), "new");
  EXPECT_EQ(permissions_of(path), 0600u);
  ASSERT_EQ(::chmod(path.c_str(), 0640), 0);
  write_file_atomically(path, "newer");
  EXPECT_EQ(permissions_of(path), 0640u);
}

TEST(AtomicFile, CheckRefusesWhatCannotBeReplacedNamingTheFlag) {
  ScratchDir dir;
  NonRegularTargets targets(dir);
  const auto read_only = dir.file("read-only.json");
  std::ofstream(read_only) << "keep me";
  ASSERT_EQ(::chmod(read_only.c_str(), 0444), 0);
  std::vector<std::string> refused = targets.paths();
  refused.push_back(read_only);
  refused.push_back(dir.file(std::string(250, 'x') + ".json"));  // with its temporary name, past NAME_MAX
  refused.push_back(dir.path() + "/");
  for (const auto& path : refused) {
    try {
      check_writable_output("--json", path);
      ADD_FAILURE() << "accepted: " << path;
    } catch (const UsageError& e) {
      EXPECT_EQ(std::string(e.what()).rfind("--json: ", 0), 0u) << e.what();
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos) << "one line: " << e.what();
    }
  }
  targets.expect_untouched();
  EXPECT_EQ(read_text(read_only), "keep me");
  EXPECT_NO_THROW(check_writable_output("--json", dir.file(std::string(200, 'y') + ".json")));
}

}  // namespace
}  // namespace ddpbench
