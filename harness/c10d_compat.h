#pragma once
// The c10d differences between LibTorch 1.13 and 2.x, in one place: process groups derive from
// c10d::ProcessGroup in 1.13 and from c10d::Backend in 2.x; NCCL exists only in CUDA builds.
#include <torch/csrc/distributed/c10d/Store.hpp>
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

// Gloo over TCP. `interface` (GLOO_SOCKET_IFNAME) wins; otherwise it binds `hostname`'s address.
c10::intrusive_ptr<CollectiveBackend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout, const std::string& hostname,
                                                      const std::string& interface);

// NCCL on the current CUDA device; throws when this LibTorch has no NCCL.
c10::intrusive_ptr<CollectiveBackend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout);
bool have_nccl();

}  // namespace ddpbench::compat
