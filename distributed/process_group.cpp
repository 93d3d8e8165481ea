#include "distributed/process_group.h"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <optional>
#include <sstream>

#include "base/watchdog.h"
#include "compat/torch_compat.h"

namespace ddpbench {
namespace {

std::string seconds(std::chrono::milliseconds t) {
  std::ostringstream out;
  out << static_cast<double>(t.count()) / 1000.0;
  return out.str();
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::string rendezvous_address(const RankEnv& env) {
  return "MASTER_ADDR=" + env.master_addr + " MASTER_PORT=" + std::to_string(env.master_port);
}

// How a TCP connection to the rendezvous fares within `wait`: a connect() left to block would wait
// out the kernel's SYN retries (about two minutes) on a host that drops packets.
enum class Reach { Connected, Refused, NoAnswer };

struct Connection {
  Reach reach = Reach::NoAnswer;
  int fd = -1;  // open when Connected; the caller closes it
};

Connection connect_within(const RankEnv& env, int wait_ms) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(env.master_port);
  if (::getaddrinfo(env.master_addr.c_str(), port.c_str(), &hints, &found) != 0) return {};
  Connection c;
  c.fd = ::socket(found->ai_family, found->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, found->ai_protocol);
  if (c.fd >= 0) {
    int error = ::connect(c.fd, found->ai_addr, found->ai_addrlen) == 0 ? 0 : errno;
    if (error == EINPROGRESS) {
      pollfd p{c.fd, POLLOUT, 0};
      socklen_t size = sizeof(error);
      error = ETIMEDOUT;
      if (::poll(&p, 1, wait_ms) == 1) ::getsockopt(c.fd, SOL_SOCKET, SO_ERROR, &error, &size);
    }
    if (error == 0) {
      c.reach = Reach::Connected;
    } else {
      c.reach = error == ECONNREFUSED ? Reach::Refused : Reach::NoAnswer;
      ::close(c.fd);
      c.fd = -1;
    }
  }
  ::freeaddrinfo(found);
  return c;
}

// A c10d store server never speaks first and keeps a connection open. Something else on the port
// (a web server that greets, an ssh daemon, one that closes at once) is told apart before c10d's
// client meets it: on 1.13 that client's own thread dies of the garbage (std::terminate), beyond
// any catch. Nothing is sent, so a real store only sees a connection come and go. Throws
// UsageError naming the port; returns quietly when nothing can be told (not reachable yet,
// silent).
void refuse_a_server_that_is_not_c10d(const RankEnv& env) {
  const Connection c = connect_within(env, 1000);
  if (c.reach != Reach::Connected) return;
  std::string unasked;
  bool closed = false;
  pollfd p{c.fd, POLLIN, 0};
  if (::poll(&p, 1, 200) == 1) {
    char buffer[64];
    const ssize_t n = ::recv(c.fd, buffer, sizeof(buffer), MSG_DONTWAIT);
    if (n > 0) unasked.assign(buffer, static_cast<std::size_t>(n));
    closed = n == 0;
  }
  ::close(c.fd);
  if (unasked.empty() && !closed) return;
  std::string shown;
  for (char ch : unasked.substr(0, unasked.find_first_of("\r\n"))) shown += (ch >= 32 && ch < 127) ? ch : '?';
  throw UsageError(rendezvous_address(env) + ": what listens there is not a c10d store (torchrun's, or rank 0's): it " +
                   (closed ? std::string("closed the connection at once") : "spoke first ('" + shown.substr(0, 40) + "')"));
}

// Said when c10d's client has not come back by the join deadline: what the port does now tells a
// rendezvous that nobody hosts (c10d 2.x's connect retries under load can outlast --timeout)
// from a listener that accepts and never answers.
std::string why_the_rendezvous_is_silent(const RankEnv& env, std::chrono::milliseconds timeout) {
  const std::string within = " within " + seconds(timeout) + " s (--timeout): ";
  const Connection c = connect_within(env, 500);
  if (c.fd >= 0) ::close(c.fd);
  switch (c.reach) {
    case Reach::Refused:
      return rendezvous_address(env) + ": rendezvous unreachable" + within +
             "nothing listens there (connection refused); is rank 0 or torchrun's store up?";
    case Reach::NoAnswer:
      return rendezvous_address(env) + ": rendezvous unreachable" + within +
             "no answer to a connection (host down, or a firewall drops it)";
    case Reach::Connected:
      break;
  }
  return rendezvous_address(env) + ": nothing answered the rendezvous" + within +
         "what listens there accepts connections but is not a c10d store that answers";
}

c10::intrusive_ptr<c10d::Store> connect_store(const RankEnv& env, std::chrono::milliseconds timeout) {
  compat::TcpStoreSettings settings;
  settings.port = static_cast<std::uint16_t>(env.master_port);
  settings.is_server = env.rank == 0 && !env.launcher_hosts_store;
  settings.timeout = timeout;  // ranks are counted below, with a clear error when they disagree
  const std::string where = rendezvous_address(env);
  // A name that does not resolve is said as such, at once: c10d would retry it for the whole
  // --timeout and then blame the connection.
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = ::getaddrinfo(env.master_addr.c_str(), nullptr, &hints, &found); rc != 0) {
    throw UsageError("MASTER_ADDR=" + env.master_addr + ": cannot resolve the host name (" + ::gai_strerror(rc) + ")");
  }
  ::freeaddrinfo(found);
  if (!settings.is_server && !env.launcher_hosts_store) refuse_a_server_that_is_not_c10d(env);
  try {
    return compat::make_tcp_store(env.master_addr, settings);
  } catch (const std::exception& e) {
    if (settings.is_server) {
      throw UsageError(where + ": rank 0 cannot host the rendezvous there (port taken or address not local): " +
                       first_line(e.what()));
    }
    throw UsageError(where + ": rendezvous unreachable within " + seconds(timeout) + " s (--timeout): " +
                     first_line(e.what()));
  }
}

void check_store_answers(c10d::Store& store, const RankEnv& env, std::chrono::milliseconds timeout) {
  // What answered must be a c10d store: a value written is read back. Something else on the port
  // (a web server) gives garbage, which would read as a count of ranks or a world size.
  const std::string probe = "probe/" + std::to_string(env.rank) + "/" + std::to_string(::getpid());
  std::string echoed, why;
  try {
    store.set(probe, as_bytes("ddpbench"));
    echoed = as_string(store.get(probe));
  } catch (const std::exception& e) {
    why = ": " + first_line(e.what());
  }
  if (echoed != "ddpbench") {
    throw UsageError(rendezvous_address(env) + ": no answer as a c10d store (torchrun's, or rank 0's) within " +
                     seconds(timeout) + " s (--timeout)" + why);
  }
}

// Every rank publishes its world size; each compares with rank 0's, and rank 0 with everyone's, so
// inconsistent launches fail fast on both sides instead of waiting for ranks that will never come.
void agree_on_world_size(c10d::Store& store, const RankEnv& env, std::chrono::milliseconds timeout) {
  const std::string mine = std::to_string(env.world_size);
  if (store.add("claims/" + std::to_string(env.rank), 1) > 1) {
    throw UsageError("RANK=" + std::to_string(env.rank) + ": another process already joined as this rank");
  }
  store.set("world_size/" + std::to_string(env.rank), as_bytes(mine));
  auto read = [&](int rank) {
    const std::string key = "world_size/" + std::to_string(rank);
    try {
      store.wait({key}, timeout);
    } catch (const std::exception&) {
      throw UsageError("WORLD_SIZE=" + mine + ": rank " + std::to_string(rank) + " did not join within " +
                       seconds(timeout) + " s (--timeout)");
    }
    return as_string(store.get(key));
  };
  const auto disagree = [&](int rank, const std::string& theirs) {
    return UsageError("WORLD_SIZE=" + mine + " here (rank " + std::to_string(env.rank) + ") but rank " +
                      std::to_string(rank) + " has WORLD_SIZE=" + theirs + ": every rank must be launched alike");
  };
  const auto seen = [](int rank) { return "world_size_seen/" + std::to_string(rank); };
  if (env.rank != 0) {
    const std::string theirs = read(0);
    store.set(seen(env.rank), as_bytes("1"));  // rank 0 may leave now: this rank has its answer
    if (theirs != mine) throw disagree(0, theirs);
  } else {
    for (int r = 1; r < env.world_size; ++r) {
      const std::string theirs = read(r);
      if (theirs == mine) continue;
      // Rank 0 hosts the store: leaving at once would cut rank r off before it read rank 0's
      // world size, and it would fail with a broken connection instead of this one line.
      try {
        store.wait({seen(r)}, std::min(timeout, std::chrono::milliseconds(5000)));
      } catch (const std::exception&) {
        // it has gone already, or is stuck: its own timeout speaks for it
      }
      throw disagree(r, theirs);
    }
  }
}

}  // namespace

bool nccl_waits_on_the_stream() {
  const char* value = std::getenv("DDPBENCH_NCCL_WAIT");
  if (value == nullptr || std::string(value).empty() || std::string(value) == "stream") return true;
  if (std::string(value) == "host") return false;
  throw UsageError(std::string("DDPBENCH_NCCL_WAIT: expected host or stream, got '") + value + "'");
}

ProcessGroupContext::ProcessGroupContext(c10::intrusive_ptr<c10d::Store> store, int rank, int size, DeviceKind kind,
                                         std::chrono::milliseconds timeout, const std::string& hostname)
    : store_(std::move(store)), rank_(rank), size_(size), kind_(kind), timeout_(timeout), hostname_(hostname) {
  const bool stream_waits = nccl_waits_on_the_stream();  // read on CPU too: a misspelling fails anywhere
  auto group_store = c10::make_intrusive<c10d::PrefixStore>("group/", store_);
  if (kind == DeviceKind::Cuda) {
    group_ = compat::make_nccl_group(group_store, rank, size, timeout);
    stream_waits_ = stream_waits;
  } else {
    const char* interface = std::getenv("GLOO_SOCKET_IFNAME");
    group_ = compat::make_gloo_group(group_store, rank, size, timeout, hostname, interface ? interface : "");
  }
}

ProcessGroupContext::~ProcessGroupContext() { compat::shutdown_group(group_); }

std::unique_ptr<ProcessGroupContext> ProcessGroupContext::subgroup(const std::string& name,
                                                                   const std::vector<int>& members) const {
  const auto me = std::find(members.begin(), members.end(), rank_);
  if (me == members.end()) {
    throw std::logic_error("subgroup " + name + ": rank " + std::to_string(rank_) + " is not among its members");
  }
  // The members in the keys' prefix: two groups of one name (a mesh's two tp groups) meet apart.
  std::string prefix = "subgroup/" + name + "/";
  for (int m : members) prefix += std::to_string(m) + ".";
  auto store = c10::make_intrusive<c10d::PrefixStore>(prefix + "/", store_);
  auto group = std::make_unique<ProcessGroupContext>(store, static_cast<int>(me - members.begin()),
                                                     static_cast<int>(members.size()), kind_, timeout_, hostname_);
  group->local_rank_ = local_rank_;
  return group;
}

std::unique_ptr<ProcessGroupContext> ProcessGroupContext::join(
    const RankEnv& env, DeviceKind kind, std::chrono::milliseconds timeout,
    const std::function<void(const std::string&)>& on_silent_rendezvous) {
  if (kind == DeviceKind::Cuda) compat::cuda_set_device(env.local_rank);  // before the first collective
  c10::intrusive_ptr<c10d::PrefixStore> store;
  {
    // Measured: with a listener that accepts and never answers on MASTER_PORT, c10d's client was
    // still waiting after 90 s under a timeout of 3 s.
    std::optional<StepWatchdog> deadline;
    if (on_silent_rendezvous) {
      deadline.emplace(timeout + std::chrono::seconds(2), [&] {
        on_silent_rendezvous(why_the_rendezvous_is_silent(env, timeout));
      });
      deadline->arm();
    }
    auto tcp = connect_store(env, timeout);
    store = c10::make_intrusive<c10d::PrefixStore>(env.store_prefix, tcp);
    store->setTimeout(timeout);
    check_store_answers(*store, env, timeout);
  }
  agree_on_world_size(*store, env, timeout);
  // Gloo binds one address for its pairs: loopback for a one-host rendezvous, else this host's name.
  std::string hostname = "127.0.0.1";
  if (!is_loopback(env.master_addr)) {
    char name[256] = {};
    gethostname(name, sizeof(name) - 1);
    hostname = name;
  }
  try {
    auto group = std::make_unique<ProcessGroupContext>(store, env.rank, env.world_size, kind, timeout, hostname);
    group->local_rank_ = env.local_rank;
    return group;
  } catch (const UsageError&) {
    throw;
  } catch (const std::exception& e) {
    throw CommFailure("rank " + std::to_string(env.rank) + ": process group setup failed: " + first_line(e.what()));
  }
}

std::string ProcessGroupContext::backend_name() const { return group_->getBackendName(); }

c10::intrusive_ptr<c10d::Work> ProcessGroupContext::allreduce_async(const torch::Tensor& flat) {
  std::vector<torch::Tensor> tensors{flat};  // one flat tensor: Gloo would also sum across a list
  return group_->allreduce(tensors);
}

void ProcessGroupContext::wait(const c10::intrusive_ptr<c10d::Work>& work, const std::string& what) const {
  try {
    if (stream_waits_) {
      work->wait();  // no timeout given: the current stream waits, the host does not (the watchdog's timeout holds)
    } else {
      work->wait(timeout_);
    }
  } catch (const std::exception& e) {
    throw CommFailure(what + " failed on rank " + std::to_string(rank_) + " (a peer died, hung or timed out after " +
                      seconds(timeout_) + " s): " + first_line(e.what()));
  }
}

void ProcessGroupContext::allreduce(const torch::Tensor& flat, const std::string& what) {
  wait(allreduce_async(flat), what);
}

void ProcessGroupContext::allreduce_max(const torch::Tensor& flat, const std::string& what) {
  std::vector<torch::Tensor> tensors{flat};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  wait(group_->allreduce(tensors, options), what);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupContext::send_async(const torch::Tensor& flat, int to, int tag) {
  std::vector<torch::Tensor> tensors{flat};
  return group_->send(tensors, to, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupContext::recv_async(const torch::Tensor& flat, int from, int tag) {
  std::vector<torch::Tensor> tensors{flat};
  return group_->recv(tensors, from, tag);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupContext::reduce_scatter_base_async(torch::Tensor output,
                                                                              torch::Tensor input) {
  return group_->_reduce_scatter_base(output, input);
}

c10::intrusive_ptr<c10d::Work> ProcessGroupContext::allgather_base_async(torch::Tensor output, torch::Tensor input) {
  return group_->_allgather_base(output, input);
}

void ProcessGroupContext::broadcast_from_rank0(const std::vector<torch::Tensor>& tensors, const std::string& what) {
  std::vector<torch::ScalarType> dtypes;
  for (const auto& t : tensors) {
    if (std::find(dtypes.begin(), dtypes.end(), t.scalar_type()) == dtypes.end()) dtypes.push_back(t.scalar_type());
  }
  for (auto dtype : dtypes) {
    std::vector<torch::Tensor> group;
    for (const auto& t : tensors) {
      if (t.scalar_type() == dtype) group.push_back(t.detach().reshape({-1}));
    }
    const torch::Tensor values = torch::cat(group);
    if (values.numel() == 0) continue;  // zero-element tensors only: nothing to send
    // A broadcast copies bits: a dtype the backend may not send (Gloo has no bool, 1.13's Gloo no
    // bfloat16) goes as its bytes, which every backend sends.
    std::vector<torch::Tensor> flat{values};
    if (dtype == torch::kBool || dtype == torch::kBFloat16 || dtype == torch::kHalf) flat[0] = values.view(torch::kByte);
    wait(group_->broadcast(flat), what);
    flat[0] = flat[0].view(dtype);
    std::int64_t offset = 0;
    torch::NoGradGuard no_grad;
    for (const auto& t : tensors) {
      if (t.scalar_type() != dtype) continue;
      t.detach().copy_(flat[0].narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
}

void ProcessGroupContext::barrier(const std::string& what) {
  // A one-element all-reduce: a barrier that also works on NCCL without a device hint.
  auto options = torch::TensorOptions().device(kind_ == DeviceKind::Cuda ? torch::Device(torch::kCUDA, local_rank_)
                                                                          : torch::Device(torch::kCPU));
  allreduce(torch::zeros({1}, options), what);
}

}  // namespace ddpbench
