#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness/atomic_file.h"
#include "harness/errors.h"
#include "test_support.h"

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

}  // namespace
}  // namespace ddpbench
