#include "compat/cuda_ipc.h"

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <string>

#if DDPBENCH_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace ddpbench::compat {
namespace {
std::atomic<std::int64_t> allocated_bytes{0};
}  // namespace

std::int64_t cuda_ipc_allocated_bytes() { return allocated_bytes.load(); }

#if DDPBENCH_WITH_CUDA

static_assert(sizeof(cudaIpcMemHandle_t) == sizeof(CudaIpcHandle), "cudaIpcMemHandle_t is not 64 bytes");

namespace {
void check(cudaError_t status, const std::string& what) {
  if (status != cudaSuccess) throw std::runtime_error(what + ": " + cudaGetErrorString(status));
}
}  // namespace

std::shared_ptr<void> cuda_ipc_allocate(int index, std::size_t bytes, CudaIpcHandle& handle) {
  check(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
  void* data = nullptr;
  check(cudaMalloc(&data, bytes), "cudaMalloc of " + std::to_string(bytes) + " bytes for CUDA IPC");
  auto free_it = [index, bytes](void* p) {
    // Whatever the device still runs on it finishes first; cudaFree would wait too, but only for
    // this process's work, and the call must not throw from a deleter.
    cudaSetDevice(index);
    cudaDeviceSynchronize();
    cudaFree(p);
    allocated_bytes -= static_cast<std::int64_t>(bytes);
  };
  allocated_bytes += static_cast<std::int64_t>(bytes);
  std::shared_ptr<void> owned(data, free_it);
  check(cudaMemset(data, 0, bytes), "cudaMemset");
  cudaIpcMemHandle_t h{};
  check(cudaIpcGetMemHandle(&h, data), "cudaIpcGetMemHandle");
  static_assert(sizeof(h) == sizeof(handle.bytes));
  std::memcpy(handle.bytes, &h, sizeof(h));
  check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");  // the zeroes are in before a worker maps it
  return owned;
}

std::shared_ptr<void> cuda_ipc_open(int index, const CudaIpcHandle& handle) {
  check(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
  cudaIpcMemHandle_t h{};
  std::memcpy(&h, handle.bytes, sizeof(h));
  void* data = nullptr;
  check(cudaIpcOpenMemHandle(&data, h, cudaIpcMemLazyEnablePeerAccess), "cudaIpcOpenMemHandle");
  return std::shared_ptr<void>(data, [index](void* p) {
    cudaSetDevice(index);
    cudaDeviceSynchronize();
    cudaIpcCloseMemHandle(p);
  });
}

std::int64_t cuda_device_free_bytes(int index) {
  check(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
  std::size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return static_cast<std::int64_t>(free);
}

#else  // CPU-only LibTorch

std::shared_ptr<void> cuda_ipc_allocate(int, std::size_t, CudaIpcHandle&) {
  throw std::runtime_error("CUDA IPC needs a LibTorch built with CUDA");
}
std::shared_ptr<void> cuda_ipc_open(int, const CudaIpcHandle&) {
  throw std::runtime_error("CUDA IPC needs a LibTorch built with CUDA");
}
std::int64_t cuda_device_free_bytes(int) { return 0; }

#endif

}  // namespace ddpbench::compat
