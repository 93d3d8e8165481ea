#pragma once
// The c10d differences between LibTorch 1.13 and 2.x, in one place: process groups derive from
// c10d::ProcessGroup in 1.13 and from c10d::Backend in 2.x; NCCL exists only in CUDA builds.
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <chrono>
#include <string>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace ddpbench::compat {

#if TORCH_VERSION_MAJOR >= 2
using CollectiveBackend = c10d::Backend;
#else
using CollectiveBackend = c10d::ProcessGroup;
#endif

// What a TCP rendezvous store is asked for; the rest of TCPStoreOptions keeps LibTorch's defaults.
struct TcpStoreSettings {
  std::uint16_t port = 0;  // 0 on a server: a free port chosen by the kernel
  bool is_server = false;
  std::chrono::milliseconds timeout{30000};
};

// A TCPStore server or client. From 2.4 on, LibTorch asks for its libuv server by default, and a
// LibTorch built without libuv (Debian's 2.6) refuses that: there the classic implementation is
// used. Both speak the same protocol, so servers and clients of either kind interoperate.
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, const TcpStoreSettings& settings);

// Tears a process group down before the process exits: NCCL in 2.x warns at exit about a group
// that was never shut down, and its communicators are released cleanly. Nothing to do for Gloo
// or before 2.x. Never throws.
void shutdown_group(const c10::intrusive_ptr<CollectiveBackend>& group) noexcept;

// Gloo over TCP. `interface` (GLOO_SOCKET_IFNAME) wins; otherwise it binds `hostname`'s address.
c10::intrusive_ptr<CollectiveBackend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout, const std::string& hostname,
                                                      const std::string& interface);

// NCCL on the current CUDA device; throws when this LibTorch has no NCCL.
c10::intrusive_ptr<CollectiveBackend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout);
bool have_nccl();

// Whether this LibTorch's Gloo sends bf16 tensors: 1.13's refuses them ("Invalid scalar type").
bool gloo_sends_bf16();

}  // namespace ddpbench::compat
