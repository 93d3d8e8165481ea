#include "compat/c10d_compat.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <stdexcept>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddpbench::compat {

namespace {

c10d::TCPStoreOptions tcp_store_options(const TcpStoreSettings& settings) {
  c10d::TCPStoreOptions options;
  options.port = settings.port;
  options.isServer = settings.is_server;
  options.waitWorkers = false;  // callers count their ranks themselves, with errors that name them
  options.timeout = settings.timeout;
  return options;
}

}  // namespace

#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, const TcpStoreSettings& settings) {
  auto options = tcp_store_options(settings);
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, options);
  } catch (const std::exception& e) {
    // The refusal comes before any socket is opened, so trying again costs nothing.
    if (std::string(e.what()).find("libuv") == std::string::npos) throw;
  }
  options.useLibUV = false;
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}
#else
c10::intrusive_ptr<c10d::TCPStore> make_tcp_store(const std::string& host, const TcpStoreSettings& settings) {
  return c10::make_intrusive<c10d::TCPStore>(host, tcp_store_options(settings));
}
#endif

c10::intrusive_ptr<CollectiveBackend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout, const std::string& hostname,
                                                      const std::string& interface) {
  auto options = c10d::ProcessGroupGloo::Options::create(timeout);
  options->devices.push_back(interface.empty() ? c10d::ProcessGroupGloo::createDeviceForHostname(hostname)
                                               : c10d::ProcessGroupGloo::createDeviceForInterface(interface));
  // One worker thread: buckets then complete in the order they were launched, and a rank's
  // communication takes one core at most, leaving the others to backward.
  options->threads = 1;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, options);
}

void shutdown_group(const c10::intrusive_ptr<CollectiveBackend>& group) noexcept {
#if defined(USE_C10D_NCCL) && (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3))
  if (auto* nccl = dynamic_cast<c10d::ProcessGroupNCCL*>(group.get())) {
    try {
      nccl->shutdown();
    } catch (const std::exception&) {
      // a group whose peer died may refuse a clean shutdown; the process is leaving either way
    }
  }
#else
  (void)group;
#endif
}

bool have_nccl() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

bool gloo_sends_bf16() { return TORCH_VERSION_MAJOR >= 2; }

c10::intrusive_ptr<CollectiveBackend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                                                      std::chrono::milliseconds timeout) {
#ifdef USE_C10D_NCCL
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  throw std::runtime_error("this LibTorch was built without NCCL (USE_C10D_NCCL)");
#endif
}

}  // namespace ddpbench::compat
