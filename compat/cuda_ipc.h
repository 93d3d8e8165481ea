#pragma once
// CUDA IPC: one device allocation that other processes map by a handle passed to them as bytes
// (hogwild's processes mode shares its parameters and batch buffer this way). The allocation is
// cudaMalloc's own, not a caching-allocator block: a handle names a whole cudaMalloc allocation,
// and a block the caching allocator reused would be freed or handed to another tensor while the
// workers still map it. CPU-only builds compile it too, and throw when asked to allocate.
#include <cstddef>
#include <cstdint>
#include <memory>

namespace ddpbench::compat {

// cudaIpcMemHandle_t's bytes (64 in every CUDA release); plain bytes so that it can sit in shared
// memory and in headers that do not include CUDA's.
struct CudaIpcHandle {
  char bytes[64];
};

// `bytes` of zeroed device memory on CUDA device `index` and its handle. The memory is freed (after
// the device has finished its work) when the last copy of the returned pointer goes. Throws
// std::runtime_error naming the failing call, or on a CPU-only build.
std::shared_ptr<void> cuda_ipc_allocate(int index, std::size_t bytes, CudaIpcHandle& handle);
// Maps another process's allocation into this one, on device `index` (which becomes current). It
// is unmapped when the last copy of the returned pointer goes. Throws std::runtime_error.
std::shared_ptr<void> cuda_ipc_open(int index, const CudaIpcHandle& handle);
// Bytes of cuda_ipc_allocate's allocations this process has not freed yet.
std::int64_t cuda_ipc_allocated_bytes();
// The device's free memory as the driver reports it (every process's use counted); 0 on CPU builds.
std::int64_t cuda_device_free_bytes(int index);

}  // namespace ddpbench::compat
