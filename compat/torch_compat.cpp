#include "compat/torch_compat.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/matmul.h>
#include <ATen/ops/ones.h>
#include <ATen/ops/softmax.h>
#if TORCH_VERSION_MAJOR >= 2
#include <ATen/ops/scaled_dot_product_attention.h>
#endif
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_fused_sgd.h>
#endif
#include <torch/cuda.h>

#include <c10/util/Logging.h>
#include <dlfcn.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#if DDPBENCH_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>  // at::cuda::clearCublasWorkspaces (2.x)
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
// The NCCL version comes from LibTorch (libtorch_cuda), so ddpbench never links NCCL itself: the
// wheel keeps libnccl in another wheel, and calling it directly needs that library on the link line.
#if __has_include(<torch/csrc/cuda/nccl.h>)
#include <torch/csrc/cuda/nccl.h>
#define DDPBENCH_HAVE_TORCH_NCCL_H 1
#endif
#endif

namespace ddpbench::compat {

void WrappingAllocator::copy_data(void* dest, const void* src, std::size_t count) const {
  std::memcpy(dest, src, count);
}

void silence_library_logging() {
  if (std::getenv("TORCH_CPP_LOG_LEVEL") != nullptr || std::getenv("GLOG_minloglevel") != nullptr) return;
  constexpr int kFatal = 3;  // glog's and c10's numbering: INFO 0, WARNING 1, ERROR 2, FATAL 3
  FLAGS_caffe2_log_level = kFatal;  // c10's own logging, in builds without glog
  // glog's threshold (fLI::FLAGS_minloglevel), looked up at run time: builds with glog have it in
  // the process, and ddpbench needs neither glog's headers nor a link to it.
  if (auto* glog_level = static_cast<std::int32_t*>(dlsym(RTLD_DEFAULT, "_ZN3fLI17FLAGS_minloglevelE"))) {
    *glog_level = kFatal;
  }
}

std::string torch_version() { return TORCH_VERSION; }

bool built_with_cuda() { return DDPBENCH_WITH_CUDA != 0; }

bool cuda_available() { return built_with_cuda() && torch::cuda::is_available(); }

int cuda_device_count() { return cuda_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

at::Generator make_cpu_generator(std::uint64_t seed) { return at::detail::createCPUGenerator(seed); }

// PyTorch 2.4 replaced the per-device functions (set_enabled for CUDA, set_cpu_enabled, ...) with
// ones that take the device type; the old ones warn as deprecated there.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
namespace {
AutocastState autocast_state(c10::DeviceType type) {
  return {at::autocast::is_autocast_enabled(type), at::autocast::get_autocast_dtype(type)};
}
void set_autocast_state(c10::DeviceType type, const AutocastState& state) {
  at::autocast::set_autocast_dtype(type, state.dtype);
  at::autocast::set_autocast_enabled(type, state.enabled);
}
}  // namespace
#else
namespace {
AutocastState autocast_state(c10::DeviceType type) {
  if (type == c10::DeviceType::CUDA) return {at::autocast::is_enabled(), at::autocast::get_autocast_gpu_dtype()};
  return {at::autocast::is_cpu_enabled(), at::autocast::get_autocast_cpu_dtype()};
}
void set_autocast_state(c10::DeviceType type, const AutocastState& state) {
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_autocast_gpu_dtype(state.dtype);
    at::autocast::set_enabled(state.enabled);
  } else {
    at::autocast::set_autocast_cpu_dtype(state.dtype);
    at::autocast::set_cpu_enabled(state.enabled);
  }
}
}  // namespace
#endif

AutocastState autocast_enter(c10::DeviceType device_type, c10::ScalarType dtype) {
  const AutocastState previous = autocast_state(device_type);
  set_autocast_state(device_type, {true, dtype});
  at::autocast::increment_nesting();
  return previous;
}

std::optional<c10::ScalarType> autocast_dtype(c10::DeviceType device_type) {
  const AutocastState state = autocast_state(device_type);
  if (!state.enabled) return std::nullopt;
  return state.dtype;
}

void autocast_exit(c10::DeviceType device_type, const AutocastState& previous) {
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  set_autocast_state(device_type, previous);
}

at::Tensor causal_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(query, key, value, /*attn_mask=*/{}, /*dropout_p=*/0.0, /*is_causal=*/true);
#else
  const auto tokens = query.size(-2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(query.size(-1)));
  auto scores = at::matmul(query, key.transpose(-2, -1)) * scale;
  const auto future = at::ones({tokens, tokens}, query.options().dtype(at::kBool)).triu(1);
  scores = scores.masked_fill(future, -std::numeric_limits<double>::infinity());
  return at::matmul(at::softmax(scores, -1), value);
#endif
}

#define DDPBENCH_HAVE_FUSED_OPTIMIZERS (TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4))

bool has_fused_optimizers(c10::DeviceType device_type) {
  return DDPBENCH_HAVE_FUSED_OPTIMIZERS && (device_type == c10::DeviceType::CPU || device_type == c10::DeviceType::CUDA);
}

void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& state_steps, const FusedAdamWOptions& o) {
#if DDPBENCH_HAVE_FUSED_OPTIMIZERS
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, /*max_exp_avg_sqs=*/{}, state_steps, o.lr, o.beta1, o.beta2,
                    o.weight_decay, o.eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)state_steps, (void)o;
  throw std::logic_error("fused_adamw_step: this LibTorch has no fused AdamW (has_fused_optimizers says so)");
#endif
}

void fused_sgd_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                    const std::vector<at::Tensor>& momentum_buffers, bool first_step, const FusedSgdOptions& o) {
#if DDPBENCH_HAVE_FUSED_OPTIMIZERS
  at::_fused_sgd_(params, grads, momentum_buffers, o.weight_decay, o.momentum, o.lr, o.dampening, o.nesterov,
                  /*maximize=*/false, first_step);
#else
  (void)params, (void)grads, (void)momentum_buffers, (void)first_step, (void)o;
  throw std::logic_error("fused_sgd_step: this LibTorch has no fused SGD (has_fused_optimizers says so)");
#endif
}

const char* causal_attention_kernel() { return TORCH_VERSION_MAJOR >= 2 ? "sdpa" : "plain"; }

#if DDPBENCH_WITH_CUDA

std::optional<std::string> cuda_version() {
  int v = 0;
  if (cudaRuntimeGetVersion(&v) != cudaSuccess) return std::nullopt;
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

std::optional<std::string> nccl_version() {
#ifdef DDPBENCH_HAVE_TORCH_NCCL_H
  // major << 32 | minor << 16 | patch, as torch.cuda.nccl.version() decodes it; 0 without NCCL.
  const std::uint64_t v = torch::cuda::nccl::version();
  if (v == 0) return std::nullopt;
  return std::to_string(v >> 32) + "." + std::to_string((v >> 16) & 0xffff) + "." + std::to_string(v & 0xffff);
#else
  return std::nullopt;
#endif
}

std::string cuda_device_name(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return "unknown CUDA device";
  return prop.name;
}

std::int64_t cuda_device_total_memory(int index) {
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return 0;
  return static_cast<std::int64_t>(prop.totalGlobalMem);
}

void cuda_synchronize(int index) {
  c10::cuda::set_device(static_cast<c10::DeviceIndex>(index));
  c10::cuda::device_synchronize();
}

void cuda_set_device(int index) {
  // cudaSetDevice itself, not c10::cuda::set_device: c10's skips the call when the index is
  // already current, and a new thread's current index is 0 before it has any context. Since CUDA 12
  // cudaSetDevice also makes the device's primary context current, so a thread whose first CUDA
  // work is a cuBLAS call finds a context (cuBLAS otherwise warns that there is none).
  const cudaError_t status = cudaSetDevice(index);
  if (status != cudaSuccess) {
    throw std::runtime_error("cudaSetDevice(" + std::to_string(index) + "): " + cudaGetErrorString(status));
  }
}

namespace {
// LibTorch sets up CUDA, and its caching allocator's state for each device, on first use; before
// that the allocator's statistics throw "Invalid device argument" (a rank's first CUDA call can be
// the memory probe's). A tensor of one element on the device sets everything up.
void initialise_cuda(int index) {
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(index)));
}
}  // namespace

void cuda_reset_peak_memory(int index) {
  initialise_cuda(index);
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

std::int64_t cuda_allocated_bytes(int index) {
  initialise_cuda(index);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].current;
}

void cuda_release_cached_memory(int index) {
  initialise_cuda(index);
  cuda_synchronize(index);
#if TORCH_VERSION_MAJOR >= 2
  // One map for all devices: it releases every device's workspaces, which are rebuilt on first use.
  at::cuda::clearCublasWorkspaces();
#endif
  c10::cuda::CUDACachingAllocator::emptyCache();
}

CudaMemoryPeak cuda_peak_memory(int index) {
  initialise_cuda(index);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  // Index 0 is the aggregate over small and large pools in every version we support.
  return {stats.allocated_bytes[0].peak, stats.reserved_bytes[0].peak};
}

std::shared_ptr<void> cuda_pool_stream(int index) {
  return std::make_shared<c10::cuda::CUDAStream>(
      c10::cuda::getStreamFromPool(/*isHighPriority=*/false, static_cast<c10::DeviceIndex>(index)));
}

std::shared_ptr<void> use_cuda_stream(const std::shared_ptr<void>& stream) {
  if (!stream) return nullptr;
  return std::make_shared<c10::cuda::CUDAStreamGuard>(*static_cast<const c10::cuda::CUDAStream*>(stream.get()));
}

namespace {
void check_cuda(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(status));
}
}  // namespace

std::shared_ptr<void> cuda_record_event(int index) {
  const auto device = static_cast<c10::DeviceIndex>(index);
  c10::cuda::CUDAGuard guard(device);  // an event belongs to the device current at its creation
  cudaEvent_t event = nullptr;
  check_cuda(cudaEventCreate(&event), "cudaEventCreate");  // timing enabled (cudaEventDefault)
  std::shared_ptr<void> handle(event, [](void* e) { cudaEventDestroy(static_cast<cudaEvent_t>(e)); });
  check_cuda(cudaEventRecord(event, c10::cuda::getCurrentCUDAStream(device).stream()), "cudaEventRecord");
  return handle;
}

void cuda_wait_event(const std::shared_ptr<void>& event) {
  if (event) check_cuda(cudaEventSynchronize(static_cast<cudaEvent_t>(event.get())), "cudaEventSynchronize");
}

double cuda_elapsed_seconds(const std::shared_ptr<void>& start, const std::shared_ptr<void>& end) {
  auto* end_event = static_cast<cudaEvent_t>(end.get());
  check_cuda(cudaEventSynchronize(end_event), "cudaEventSynchronize");
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start.get()), end_event), "cudaEventElapsedTime");
  return static_cast<double>(ms) / 1000.0;
}

#else  // CPU-only LibTorch

std::optional<std::string> cuda_version() { return std::nullopt; }
std::optional<std::string> nccl_version() { return std::nullopt; }
std::string cuda_device_name(int) { return {}; }
std::int64_t cuda_device_total_memory(int) { return 0; }
void cuda_synchronize(int) {}
void cuda_set_device(int) {}
void cuda_reset_peak_memory(int) {}
std::int64_t cuda_allocated_bytes(int) { return 0; }
void cuda_release_cached_memory(int) {}
CudaMemoryPeak cuda_peak_memory(int) { return {}; }
std::shared_ptr<void> cuda_pool_stream(int) { return nullptr; }
std::shared_ptr<void> use_cuda_stream(const std::shared_ptr<void>&) { return nullptr; }
std::shared_ptr<void> cuda_record_event(int) { return nullptr; }
void cuda_wait_event(const std::shared_ptr<void>&) {}
double cuda_elapsed_seconds(const std::shared_ptr<void>&, const std::shared_ptr<void>&) { return 0; }

#endif

}  // namespace ddpbench::compat
