#include "base/fork_server.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

namespace ddpbench::fork_server {
namespace {

constexpr int kMaxDescriptors = 16;  // besides 0, 1 and 2: Hogwild's worker takes three

// The launcher's side: its end of the socket, and the executable the server stands for.
struct Server {
  int socket = -1;
  pid_t server = -1;
  std::string executable;
  std::mutex mutex;  // one request at a time on the socket
};
Server* launcher_side = nullptr;  // set once by start(), in the launcher only; lives until exit

std::string own_executable() {
  char path[4096] = {};
  const ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  return n > 0 ? std::string(path, static_cast<size_t>(n)) : std::string();
}

// Threads of this process now (its /proc/self/task entries); 0 when that cannot be read.
int thread_count() {
  int n = 0;
  if (DIR* dir = ::opendir("/proc/self/task")) {
    while (const dirent* e = ::readdir(dir))
      if (e->d_name[0] != '.') ++n;
    ::closedir(dir);
  }
  return n;
}

bool write_all(int fd, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, void* data, size_t size) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::read(fd, p, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

// The request's fields, after the descriptors it came with: strings and numbers, each number as
// eight bytes of this machine's order (both ends are this executable).
struct Writer {
  std::string bytes;
  void number(std::int64_t v) { bytes.append(reinterpret_cast<const char*>(&v), sizeof(v)); }
  void strings(const std::vector<std::string>& list) {
    number(static_cast<std::int64_t>(list.size()));
    for (const auto& s : list) {
      number(static_cast<std::int64_t>(s.size()));
      bytes += s;
    }
  }
};

struct Reader {
  const std::string& bytes;
  size_t at = 0;
  bool ok = true;
  std::int64_t number() {
    std::int64_t v = 0;
    if (at + sizeof(v) > bytes.size()) {
      ok = false;
      return 0;
    }
    std::memcpy(&v, bytes.data() + at, sizeof(v));
    at += sizeof(v);
    return v;
  }
  std::vector<std::string> strings() {
    std::vector<std::string> list;
    const std::int64_t n = number();
    for (std::int64_t i = 0; ok && i < n; ++i) {
      const std::int64_t size = number();
      if (!ok || size < 0 || at + static_cast<size_t>(size) > bytes.size()) {
        ok = false;
        break;
      }
      list.emplace_back(bytes, at, static_cast<size_t>(size));
      at += static_cast<size_t>(size);
    }
    return list;
  }
};

struct Decoded {
  std::vector<std::string> argv;  // argv[0] is the executable
  std::vector<std::string> environment;
  pid_t process_group = 0;
  std::vector<int> targets;  // the child's number for each descriptor received, in order
  rlimit open_files{};
};

// In the child, after the second fork: becomes what posix_spawn would have started (spawn_child's
// attributes), then waits until the middle process has gone and the launcher is its parent.
std::vector<std::string> become_child(const Decoded& d, const std::vector<int>& received, pid_t middle) {
  ::setpgid(0, d.process_group);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::signal(s, SIG_DFL);
  sigset_t empty;
  sigemptyset(&empty);
  ::sigprocmask(SIG_SETMASK, &empty, nullptr);
  ::setrlimit(RLIMIT_NOFILE, &d.open_files);  // the launcher may have raised its soft limit since
  // Each received descriptor onto its number: first above every target, so that no dup2 replaces
  // a descriptor still to be placed.
  int above = 3;
  for (int t : d.targets) above = std::max(above, t + 1);
  std::vector<int> moved;
  for (int fd : received) {
    moved.push_back(::fcntl(fd, F_DUPFD, above));
    ::close(fd);
  }
  for (size_t i = 0; i < moved.size() && i < d.targets.size(); ++i) ::dup2(moved[i], d.targets[i]);
  for (int fd : moved) ::close(fd);
  ::clearenv();
  for (const auto& e : d.environment) ::putenv(::strdup(e.c_str()));  // putenv keeps the pointer
  for (int waited = 0; ::getppid() == middle && waited < 50000; ++waited) ::usleep(100);
  return d.argv;
}

// The server's loop: a request, a child, its pid back; until the launcher's end closes. Returns
// only in a child it forked, with that child's argv.
std::vector<std::string> serve(int socket) {
  for (;;) {
    std::uint64_t header[2] = {0, 0};  // payload bytes, descriptors
    char control[CMSG_SPACE(sizeof(int) * (kMaxDescriptors + 3))] = {};
    iovec iov{header, sizeof(header)};
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    ssize_t n;
    do n = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n <= 0) ::_exit(0);  // the launcher is gone
    std::vector<int> received;
    for (cmsghdr* c = CMSG_FIRSTHDR(&message); c != nullptr; c = CMSG_NXTHDR(&message, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        received.push_back(fd);
      }
    }
    if (static_cast<size_t>(n) < sizeof(header) &&
        !read_all(socket, reinterpret_cast<char*>(header) + n, sizeof(header) - static_cast<size_t>(n))) {
      ::_exit(0);
    }
    std::string payload(header[0], '\0');
    if (!read_all(socket, payload.data(), payload.size())) ::_exit(0);

    std::int64_t reply = -EINVAL;
    Reader in{payload};
    Decoded d;
    d.argv = in.strings();
    d.environment = in.strings();
    d.process_group = static_cast<pid_t>(in.number());
    for (std::int64_t i = 0, k = in.number(); in.ok && i < k; ++i) d.targets.push_back(static_cast<int>(in.number()));
    d.open_files.rlim_cur = static_cast<rlim_t>(in.number());
    d.open_files.rlim_max = static_cast<rlim_t>(in.number());
    int report[2];
    if (in.ok && !d.argv.empty() && d.targets.size() == received.size() && received.size() == header[1]) {
      if (::pipe2(report, O_CLOEXEC) != 0) {
        reply = -errno;
      } else {
        const pid_t middle = ::fork();
        if (middle == 0) {
          const pid_t self = ::getpid();
          const pid_t child = ::fork();
          if (child == 0) {
            ::close(socket);
            ::close(report[0]);
            ::close(report[1]);
            return become_child(d, received, self);
          }
          const std::int64_t value = child > 0 ? child : -errno;
          write_all(report[1], &value, sizeof(value));
          ::_exit(0);
        }
        if (middle < 0) reply = -errno;
        ::close(report[1]);
        if (middle > 0) {
          if (!read_all(report[0], &reply, sizeof(reply))) reply = -EIO;
          while (::waitpid(middle, nullptr, 0) < 0 && errno == EINTR) {
          }
        }
        ::close(report[0]);
      }
    }
    for (int fd : received) ::close(fd);
    if (!write_all(socket, &reply, sizeof(reply))) ::_exit(0);
  }
}

}  // namespace

std::optional<std::vector<std::string>> start() {
  const char* setting = std::getenv("DDPBENCH_FORK_SERVER");
  if (setting != nullptr && std::string(setting) == "0") return std::nullopt;
  // A process that a launcher started (a rank exec'd by the fallback, a Hogwild worker) starts
  // no children of its own kind.
  if (std::getenv("DDPBENCH_LAUNCHER_PID") != nullptr || std::getenv("DDPBENCH_HOGWILD_WORKER") != nullptr) {
    return std::nullopt;
  }
  // A fork of a process with other threads copies their locks but not their owners: a server
  // forked then could deadlock its children. Such a process keeps posix_spawn.
  if (thread_count() != 1) return std::nullopt;
  const std::string executable = own_executable();
  if (executable.empty()) return std::nullopt;
  int ends[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ends) != 0) return std::nullopt;
  const pid_t launcher = ::getpid();
  const pid_t server = ::fork();
  if (server < 0) {
    ::close(ends[0]);
    ::close(ends[1]);
    return std::nullopt;
  }
  if (server == 0) {
    ::close(ends[0]);
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive the launcher
    if (::getppid() != launcher) ::_exit(0);
    // It holds none of its caller's standard streams (a pipe a test reads to its end would wait
    // for it), and a terminal's Ctrl-C or hang-up is the launcher's to handle.
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd <= 2; ++fd) ::dup2(null, fd);
    if (null > 2) ::close(null);
    ::signal(SIGINT, SIG_IGN);
    ::signal(SIGHUP, SIG_IGN);
    return serve(ends[1]);  // returns in a child only
  }
  ::close(ends[1]);
  // The children the server forks are orphaned by their middle process and come to this one.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    ::close(ends[0]);  // the server sees its socket close and exits
    return std::nullopt;
  }
  launcher_side = new Server;
  launcher_side->socket = ends[0];
  launcher_side->server = server;
  launcher_side->executable = executable;
  return std::nullopt;
}

void stop() {
  if (launcher_side == nullptr) return;
  std::lock_guard<std::mutex> lock(launcher_side->mutex);
  if (launcher_side->socket >= 0) ::close(launcher_side->socket);  // the server reads its end closed
  launcher_side->socket = -1;
  if (launcher_side->server > 0) {
    while (::waitpid(launcher_side->server, nullptr, 0) < 0 && errno == EINTR) {
    }
    launcher_side->server = -1;
  }
}

bool serves(const std::string& executable) {
  if (launcher_side == nullptr) return false;
  std::lock_guard<std::mutex> lock(launcher_side->mutex);
  if (launcher_side->socket < 0) return false;
  char resolved[4096] = {};
  const ssize_t n = ::readlink(executable.c_str(), resolved, sizeof(resolved) - 1);
  const std::string target = n > 0 ? std::string(resolved, static_cast<size_t>(n)) : executable;
  return target == launcher_side->executable || executable == launcher_side->executable;
}

std::optional<pid_t> spawn(const Request& request) {
  if (launcher_side == nullptr || request.descriptors.size() > kMaxDescriptors) return std::nullopt;
  std::lock_guard<std::mutex> lock(launcher_side->mutex);
  if (launcher_side->socket < 0) return std::nullopt;
  Writer out;
  std::vector<std::string> argv{launcher_side->executable};
  argv.insert(argv.end(), request.args.begin(), request.args.end());
  out.strings(argv);
  out.strings(request.environment);
  out.number(request.process_group);
  std::vector<int> fds{0, 1, 2};
  std::vector<int> targets{0, 1, 2};
  for (const auto& [ours, theirs] : request.descriptors) {
    fds.push_back(ours);
    targets.push_back(theirs);
  }
  out.number(static_cast<std::int64_t>(targets.size()));
  for (int t : targets) out.number(t);
  rlimit files{};
  ::getrlimit(RLIMIT_NOFILE, &files);
  out.number(static_cast<std::int64_t>(files.rlim_cur));
  out.number(static_cast<std::int64_t>(files.rlim_max));

  std::uint64_t header[2] = {out.bytes.size(), fds.size()};
  char control[CMSG_SPACE(sizeof(int) * (kMaxDescriptors + 3))] = {};
  iovec iov{header, sizeof(header)};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  message.msg_control = control;
  message.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
  cmsghdr* c = CMSG_FIRSTHDR(&message);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
  std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
  ssize_t n;
  do n = ::sendmsg(launcher_side->socket, &message, MSG_NOSIGNAL);
  while (n < 0 && errno == EINTR);
  std::int64_t reply = 0;
  const bool answered = n == static_cast<ssize_t>(sizeof(header)) &&
                        write_all(launcher_side->socket, out.bytes.data(), out.bytes.size()) &&
                        read_all(launcher_side->socket, &reply, sizeof(reply));
  if (!answered) {
    // The server is gone (killed from outside): this and every later child starts with posix_spawn.
    ::close(launcher_side->socket);
    launcher_side->socket = -1;
    return std::nullopt;
  }
  if (reply <= 0) throw std::runtime_error(std::string("fork server: ") + std::strerror(static_cast<int>(-reply)));
  return static_cast<pid_t>(reply);
}

}  // namespace ddpbench::fork_server
