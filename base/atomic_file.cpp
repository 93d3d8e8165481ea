#include "base/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <stdexcept>

#include "base/errors.h"

namespace ddpbench {

std::string directory_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
}

// The temporary file beside the target: "." + name + ".tmp." + pid (pids have at most 7 digits).
std::string temporary_name(const std::string& path) {
  return directory_of(path) + "/." + base_of(path) + ".tmp." + std::to_string(::getpid());
}
constexpr std::size_t kTemporaryNameExtra = 1 + 5 + 7;

// Why nothing must replace what is at `path` (empty when it is absent or a regular file), and the
// permission bits a replacement gets: the file's own, else 0644 under the umask.
struct ExistingTarget {
  std::string refusal;
  bool exists = false;
  mode_t mode = 0;
};

ExistingTarget inspect_target(const std::string& path) {
  ExistingTarget t;
  struct stat st{};
  if (::lstat(path.c_str(), &st) != 0) return t;
  t.exists = true;
  t.mode = st.st_mode & 07777;
  if (S_ISLNK(st.st_mode)) {
    t.refusal = "is a symbolic link (ddpbench replaces regular files only: name the link's target)";
  } else if (S_ISDIR(st.st_mode)) {
    t.refusal = "is a directory";
  } else if (!S_ISREG(st.st_mode)) {
    t.refusal = "is not a regular file but a device, FIFO or socket (ddpbench replaces regular files only)";
  }
  return t;
}

void write_all(int fd, const std::string& contents, const std::string& path) {
  const char* p = contents.data();
  size_t left = contents.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0) {
      if (errno == EINTR) continue;
      fail("cannot write", path);
    }
    p += n;
    left -= static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) fail("cannot flush", path);
}

}  // namespace

void write_file_atomically(const std::string& path, const std::string& contents) {
  const std::string dir = directory_of(path);
  const std::string temp = temporary_name(path);
  const ExistingTarget target = inspect_target(path);
  if (!target.refusal.empty()) throw std::runtime_error("not replacing '" + path + "': it " + target.refusal);
  // The replaced file's permission bits, not the umask's: a 0600 results file stays 0600.
  const auto keep_mode = [&](int fd) {
    if (target.exists && ::fchmod(fd, target.mode) != 0) fail("cannot set the mode of the file replacing", path);
  };

  int fd = -1;
#ifdef O_TMPFILE
  // An O_TMPFILE file has no name until linkat gives it one, so a kill before that leaves nothing.
  fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) {
    try {
      keep_mode(fd);
      write_all(fd, contents, path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    const std::string proc_path = "/proc/self/fd/" + std::to_string(fd);
    ::unlink(temp.c_str());  // a leftover from a killed earlier run with our pid
    if (::linkat(AT_FDCWD, proc_path.c_str(), AT_FDCWD, temp.c_str(), AT_SYMLINK_FOLLOW) == 0) {
      ::close(fd);
      if (::rename(temp.c_str(), path.c_str()) != 0) {
        const int saved = errno;
        ::unlink(temp.c_str());
        errno = saved;
        fail("cannot rename onto", path);
      }
      return;
    }
    ::close(fd);  // fall through to the named temporary file
  }
#endif

  fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail("cannot create", temp);
  try {
    keep_mode(fd);
    write_all(fd, contents, path);
  } catch (...) {
    ::close(fd);
    ::unlink(temp.c_str());
    throw;
  }
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(temp.c_str());
    errno = saved;
    fail("cannot rename onto", path);
  }
}

void check_writable_output(const std::string& flag, const std::string& path) {
  if (path.empty()) throw UsageError(flag + ": empty path");
  if (base_of(path).empty()) throw UsageError(flag + ": '" + path + "' names a directory, not a file");
  const ExistingTarget target = inspect_target(path);
  if (!target.refusal.empty()) throw UsageError(flag + ": '" + path + "' " + target.refusal);
  // root may write anything, so the mode bits say what the file's owner meant: no write bit at all
  // is a file that must not be replaced.
  if (target.exists && ((target.mode & 0222) == 0 || ::access(path.c_str(), W_OK) != 0)) {
    throw UsageError(flag + ": '" + path + "' is read-only; ddpbench does not replace it");
  }
  const std::string dir = directory_of(path);
  struct stat st{};
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw UsageError(flag + ": directory '" + dir + "' of '" + path + "' does not exist (create it first: mkdir -p '" +
                     dir + "')");
  }
  long name_max = ::pathconf(dir.c_str(), _PC_NAME_MAX);
  if (name_max <= 0) name_max = 255;
  const std::size_t longest = static_cast<std::size_t>(name_max) - kTemporaryNameExtra;
  if (base_of(path).size() > longest) {
    throw UsageError(flag + ": the file name of '" + path + "' is " + std::to_string(base_of(path).size()) +
                     " characters long; at most " + std::to_string(longest) +
                     " fit here (with the temporary file written beside it)");
  }
  if (temporary_name(path).size() >= PATH_MAX) {
    throw UsageError(flag + ": '" + path + "' is longer than this system's paths may be");
  }
  // access() says yes to root even where nothing can be created (a read-only mount, /proc), so
  // ask the filesystem: create an unnamed file, or a named one that is removed at once.
  int fd = -1;
#ifdef O_TMPFILE
  fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
#endif
  if (fd < 0) {
    const std::string probe = dir + "/." + base_of(path) + ".probe." + std::to_string(::getpid());
    fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd >= 0) ::unlink(probe.c_str());
  }
  if (fd < 0) {
    throw UsageError(flag + ": cannot create files in directory '" + dir + "' (" + std::strerror(errno) + ")");
  }
  ::close(fd);
}

}  // namespace ddpbench
