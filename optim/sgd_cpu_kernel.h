#pragma once
// SGD with momentum in one pass over each parameter, on the CPU, for LibTorch builds without ATen's
// fused SGD (before 2.4). The multi-tensor path makes three passes over the momentum buffer a step
// (scale it, add the gradient, add it to the parameter); this reads the parameter, the gradient and
// the buffer once and writes the parameter and the buffer once. The arithmetic is the multi-tensor
// path's, in its order, element by element (tests/optim/test_sgd_cpu_kernel.cpp holds it to
// torch::optim::SGD on every LibTorch, tests/optim/test_optimizers.cpp make_sgd as built).
#include <ATen/core/Tensor.h>

#include <vector>

namespace ddpbench {

struct SgdCpuOptions {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false;
};

// Whether the kernel takes these tensors: all on the CPU, contiguous, float32 or float64, each
// gradient and buffer of its parameter's dtype.
bool sgd_cpu_kernel_applies(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                            const std::vector<at::Tensor>& momentum_buffers);

// One step of every parameter: a first step sets its buffer to the gradient (weight decay added).
// Call only where sgd_cpu_kernel_applies; throws std::logic_error otherwise.
void sgd_cpu_kernel_step(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                         const std::vector<at::Tensor>& momentum_buffers, bool first_step, const SgdCpuOptions& o);

}  // namespace ddpbench
