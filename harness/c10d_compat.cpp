#include "harness/c10d_compat.h"

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <stdexcept>

#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

namespace ddpbench::compat {

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

bool have_nccl() {
#ifdef USE_C10D_NCCL
  return true;
#else
  return false;
#endif
}

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
