#include "optim/sgd_cpu_kernel.h"

#include <ATen/Parallel.h>
#include <c10/core/ScalarType.h>

#include <stdexcept>

namespace ddpbench {
namespace {

bool takes(const at::Tensor& t, c10::ScalarType dtype) {
  return t.defined() && t.device().is_cpu() && t.scalar_type() == dtype && t.is_contiguous() && !t.is_sparse();
}

// One range of elements. The flags are template arguments, so each loop is straight-line code the
// compiler vectorises. (AVX-512 clones of it measured no faster: the loop waits on memory.)
template <typename T, bool kDecay, bool kFirst, bool kNesterov>
void sgd_range(
    T* __restrict p, const T* __restrict g, T* __restrict buf, std::int64_t begin, std::int64_t end, T lr, T m,
    T keep, T wd) {
  for (std::int64_t i = begin; i < end; ++i) {
    const T d = kDecay ? g[i] + wd * p[i] : g[i];
    const T b = kFirst ? d : buf[i] * m + keep * d;
    buf[i] = b;
    p[i] = p[i] + (-lr) * (kNesterov ? d + m * b : b);
  }
}

template <typename T, bool kDecay, bool kFirst>
void step_with(T* p, const T* g, T* buf, std::int64_t n, bool nesterov, T lr, T m, T keep, T wd) {
  // Grains of 32 Ki elements, as ATen's element-wise kernels: a small parameter stays on one thread.
  at::parallel_for(0, n, 32768, [&](std::int64_t begin, std::int64_t end) {
    if (nesterov) {
      sgd_range<T, kDecay, kFirst, true>(p, g, buf, begin, end, lr, m, keep, wd);
    } else {
      sgd_range<T, kDecay, kFirst, false>(p, g, buf, begin, end, lr, m, keep, wd);
    }
  });
}

template <typename T>
void step_one(T* p, const T* g, T* buf, std::int64_t n, bool first_step, const SgdCpuOptions& o) {
  const T lr = static_cast<T>(o.lr), m = static_cast<T>(o.momentum), keep = static_cast<T>(1 - o.dampening),
          wd = static_cast<T>(o.weight_decay);
  const bool decay = o.weight_decay != 0;
  if (decay && first_step) step_with<T, true, true>(p, g, buf, n, o.nesterov, lr, m, keep, wd);
  if (decay && !first_step) step_with<T, true, false>(p, g, buf, n, o.nesterov, lr, m, keep, wd);
  if (!decay && first_step) step_with<T, false, true>(p, g, buf, n, o.nesterov, lr, m, keep, wd);
  if (!decay && !first_step) step_with<T, false, false>(p, g, buf, n, o.nesterov, lr, m, keep, wd);
}

}  // namespace

bool sgd_cpu_kernel_applies(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                            const std::vector<at::Tensor>& momentum_buffers) {
  if (params.size() != grads.size() || params.size() != momentum_buffers.size()) return false;
  for (size_t i = 0; i < params.size(); ++i) {
    const auto dtype = params[i].scalar_type();
    if (dtype != c10::kFloat && dtype != c10::kDouble) return false;
    if (!takes(params[i], dtype) || !takes(grads[i], dtype) || !takes(momentum_buffers[i], dtype)) return false;
    if (params[i].numel() != grads[i].numel() || params[i].numel() != momentum_buffers[i].numel()) return false;
  }
  return true;
}

void sgd_cpu_kernel_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                         const std::vector<at::Tensor>& momentum_buffers, bool first_step, const SgdCpuOptions& o) {
  if (!sgd_cpu_kernel_applies(params, grads, momentum_buffers)) {
    throw std::logic_error("sgd_cpu_kernel_step: tensors the kernel does not take (sgd_cpu_kernel_applies)");
  }
  for (size_t i = 0; i < params.size(); ++i) {
    const std::int64_t n = params[i].numel();
    if (params[i].scalar_type() == c10::kFloat) {
      step_one(params[i].data_ptr<float>(), grads[i].data_ptr<float>(), momentum_buffers[i].data_ptr<float>(), n,
               first_step, o);
    } else {
      step_one(params[i].data_ptr<double>(), grads[i].data_ptr<double>(), momentum_buffers[i].data_ptr<double>(), n,
               first_step, o);
    }
  }
}

}  // namespace ddpbench
