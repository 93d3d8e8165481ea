#include "harness/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "harness/errors.h"

namespace ddpbench {
namespace {

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

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " '" + path + "': " + std::strerror(errno));
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
  const std::string temp = dir + "/." + base_of(path) + ".tmp." + std::to_string(::getpid());

  int fd = -1;
#ifdef O_TMPFILE
  // An O_TMPFILE file has no name until linkat gives it one, so a kill before that leaves nothing.
  fd = ::open(dir.c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
  if (fd >= 0) {
    try {
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
  struct stat st{};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) throw UsageError(flag + ": '" + path + "' is a directory");
    if (::access(path.c_str(), W_OK) != 0) throw UsageError(flag + ": '" + path + "' is not writable");
  }
  const std::string dir = directory_of(path);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw UsageError(flag + ": directory '" + dir + "' of '" + path + "' does not exist");
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
