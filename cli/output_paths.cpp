#include "cli/output_paths.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "base/atomic_file.h"
#include "base/errors.h"

namespace ddpbench {
namespace {

// A lock that lives exactly as long as its holder: a socket bound to a name in Linux's abstract
// namespace. The kernel frees the name when the last descriptor closes, however the process ends,
// so a killed run leaves no lock file behind and blocks no later run. Returns the descriptor, or
// -1 when the name is taken (by another live process on this machine and network namespace).
int hold_lock(const std::string& identity) {
  char name[64];
  std::snprintf(name, sizeof(name), "ddpbench-output-%016zx", std::hash<std::string>{}(identity));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  // sun_path[0] == '\0': the abstract namespace, no file anywhere.
  std::memcpy(address.sun_path + 1, name, std::strlen(name));
  const auto length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + std::strlen(name));
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) throw std::runtime_error(std::string("cannot create a lock socket: ") + std::strerror(errno));
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), length) != 0) {
    const int saved = errno;
    ::close(fd);
    if (saved == EADDRINUSE) return -1;
    throw std::runtime_error(std::string("cannot lock an output: ") + std::strerror(saved));
  }
  return fd;
}

}  // namespace

void make_output_directory(const std::string& flag, const std::string& dir) {
  if (dir.empty()) throw UsageError(flag + ": empty path");
  // Each missing component in turn, from the root down; one that exists must be a directory.
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string part = dir.substr(0, end);
    struct stat st{};
    if (::stat(part.c_str(), &st) == 0) {
      if (!S_ISDIR(st.st_mode)) {
        throw UsageError(flag + ": '" + part + "' is in the way of directory '" + dir + "': not a directory");
      }
    } else if (::mkdir(part.c_str(), 0777) != 0 && errno != EEXIST) {
      throw UsageError(flag + ": cannot create directory '" + part + "' (" + std::strerror(errno) + ")");
    }
    if (end == std::string::npos) break;
  }
}

std::string OutputClaims::identity(const std::string& path) {
  // The directory by device and inode, not by name: a bind mount or a symbolic link is one
  // directory under two names, and a directory deeper than PATH_MAX has no canonical name at all
  // (realpath fails there) while stat() of a relative path into it works.
  struct stat st{};
  if (::stat(directory_of(path).c_str(), &st) != 0) return {};
  return std::to_string(static_cast<unsigned long long>(st.st_dev)) + ":" +
         std::to_string(static_cast<unsigned long long>(st.st_ino)) + "/" + base_of(path);
}

OutputClaims::~OutputClaims() {
  for (const auto& c : claims_) {
    if (c.lock_fd >= 0) ::close(c.lock_fd);
  }
}

void OutputClaims::claim(const std::string& flag, const std::string& path) {
  if (path == "-") {
    throw UsageError(flag + ": '-' would be a file named '-'; name a file (standard output is the table)");
  }
  const std::string id = identity(path);
  for (const auto& input : inputs_) {
    if (!id.empty() && input.identity == id) {
      throw UsageError(flag + ": '" + path + "' is the file " + input.flag + " reads ('" + input.path +
                       "'); the run would write over its own input: name another file");
    }
  }
  check_writable_output(flag, path);
  if (id.empty()) {  // its directory was there a moment ago: what it was cannot be told
    throw UsageError(flag + ": cannot look up the directory of '" + path + "'");
  }
  Claim c{flag, path, id, -1};
  for (const auto& earlier : claims_) {
    if (earlier.identity == c.identity) {
      throw UsageError(flag + ": '" + path + "' is the file that " + earlier.flag + " writes too ('" + earlier.path +
                       "'); each output needs a file of its own");
    }
  }
  c.lock_fd = hold_lock(c.identity);
  if (c.lock_fd < 0) {
    throw UsageError(flag + ": '" + path + "' is being written by another ddpbench run on this machine; " +
                     "wait for it or name another file");
  }
  claims_.push_back(std::move(c));
}

void OutputClaims::protect_input(const std::string& flag, const std::string& path) {
  inputs_.push_back(Claim{flag, path, identity(path), -1});
}

}  // namespace ddpbench
