#pragma once
// The one place that knows which LibTorch it is built against (1.13 from Debian, or 2.x from a
// PyTorch wheel) and whether that build has CUDA. Everything else calls these functions and never
// tests TORCH_VERSION or DDPBENCH_WITH_CUDA itself.

#include <c10/core/Allocator.h>
#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <torch/version.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace at {
class Generator;
class Tensor;
}

namespace ddpbench::compat {

// Allocator::allocate lost its `const` in PyTorch 2.3, which also added the pure virtual copy_data.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define DDPBENCH_ALLOCATE_QUALIFIER
#else
#define DDPBENCH_ALLOCATE_QUALIFIER const
#endif

// Base for CPU allocators that wrap another allocator; fills in what newer versions require.
class WrappingAllocator : public c10::Allocator {
 public:
  explicit WrappingAllocator(c10::Allocator* inner) : inner_(inner) {}
  c10::Allocator* inner() const { return inner_; }
  // Overrides the pure virtual where it exists (2.3+), an ordinary member before.
  void copy_data(void* dest, const void* src, std::size_t count) const;

 private:
  c10::Allocator* inner_;
};

// LibTorch's own log lines (c10d's socket retries and timeouts as W/E lines, glog's "Logging before
// InitGoogleLogging()") say again, in another format, what ddpbench's one-line errors say: below
// FATAL they are silenced, in builds with glog (Debian's 1.13) and without (2.x). A user who sets
// TORCH_CPP_LOG_LEVEL or GLOG_minloglevel keeps what they asked for.
void silence_library_logging();

std::string torch_version();
std::optional<std::string> cuda_version();  // CUDA runtime LibTorch was built with; none on CPU builds
std::optional<std::string> nccl_version();  // NCCL LibTorch was built with; none on CPU builds
bool built_with_cuda();
bool cuda_available();
int cuda_device_count();
std::string cuda_device_name(int index);
std::int64_t cuda_device_total_memory(int index);
void cuda_synchronize(int index);
void cuda_set_device(int index);

struct CudaMemoryPeak {
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
};
void cuda_reset_peak_memory(int index);
// Bytes the caching allocator has handed out on device `index` and not had back; 0 on CPU builds.
std::int64_t cuda_allocated_bytes(int index);
// Gives back what this process keeps on device `index` for no tensor of its own: cuBLAS's
// workspaces (LibTorch keeps one per stream it has run a matrix product on, 32 MiB each on Hopper,
// never freed; the caching allocator counts them as allocated, so the pool streams of one case
// would count in every later case's peak) and the allocator's cached free blocks (the reserved
// figure). Waits for the device first. Workspaces are released from LibTorch 2.0 on; 1.13 has no
// call for it (and no CUDA build of ours). Nothing on CPU builds.
void cuda_release_cached_memory(int index);
// One of LibTorch's pool streams of CUDA device `index` (round-robin over 32), as an opaque handle
// to keep: a thread that ran on a new pool stream every step would leave cuBLAS a 32 MiB workspace
// on each of them. Empty on CPU-only builds.
std::shared_ptr<void> cuda_pool_stream(int index);
// While the returned guard lives, the calling thread's current stream is `stream` (from
// cuda_pool_stream). Does nothing with an empty handle.
std::shared_ptr<void> use_cuda_stream(const std::shared_ptr<void>& stream);
CudaMemoryPeak cuda_peak_memory(int index);

// A timing CUDA event recorded now on the calling thread's current stream of device `index`; it is
// destroyed with the last handle. Empty on CPU-only builds. Throws std::runtime_error on a CUDA error.
std::shared_ptr<void> cuda_record_event(int index);
// The calling thread waits until `event` (from cuda_record_event) has completed. Nothing on an empty
// handle.
void cuda_wait_event(const std::shared_ptr<void>& event);
// Seconds of GPU time between two recorded events of one device, waiting for `end` to complete.
double cuda_elapsed_seconds(const std::shared_ptr<void>& start, const std::shared_ptr<void>& end);

// Autocast on the calling thread (autocast state, its nesting and its cast cache are all
// thread-local). autocast_enter turns it on for `device_type` (kCPU or kCUDA) at `dtype` and
// returns the state it replaced; autocast_exit restores that state and, when the outermost scope
// closes, clears the cache of weights cast to `dtype`, as torch.autocast's __exit__ does (a cached
// cast would otherwise outlive the optimizer step that changed the weight).
struct AutocastState {
  bool enabled = false;
  c10::ScalarType dtype = c10::ScalarType::Float;
};
AutocastState autocast_enter(c10::DeviceType device_type, c10::ScalarType dtype);
void autocast_exit(c10::DeviceType device_type, const AutocastState& previous);
// The type autocast casts float32 to on the calling thread for `device_type`; nothing where it is off.
std::optional<c10::ScalarType> autocast_dtype(c10::DeviceType device_type);

// Causal self-attention over [batch, heads, tokens, head_dim] queries, keys and values: ATen's
// scaled_dot_product_attention from LibTorch 2.0 on (flash or memory-efficient kernels on recent
// GPUs, a fused CPU kernel), else softmax(q k^T / sqrt(d) + causal mask) v written out.
at::Tensor causal_attention(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value);
// Which of the two causal_attention computes here: "sdpa" or "plain".
const char* causal_attention_kernel();

// ATen's fused optimizer kernels (one kernel for all parameters of a step): _fused_adamw_ and
// _fused_sgd_, on CPU and CUDA from LibTorch 2.4 on. Where absent, optim/ falls back to the
// multi-tensor _foreach_ ops. Like torch/optim's callers, the AdamW one expects each state_step
// already advanced by one.
bool has_fused_optimizers(c10::DeviceType device_type);
struct FusedAdamWOptions {
  double lr, beta1, beta2, weight_decay, eps;
};
void fused_adamw_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                      const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                      const std::vector<at::Tensor>& state_steps, const FusedAdamWOptions& options);
struct FusedSgdOptions {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};
void fused_sgd_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                    const std::vector<at::Tensor>& momentum_buffers, bool first_step, const FusedSgdOptions& options);

// A CPU generator seeded deterministically, independent of the global one.
at::Generator make_cpu_generator(std::uint64_t seed);

}  // namespace ddpbench::compat
