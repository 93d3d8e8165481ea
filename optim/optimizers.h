#pragma once
// AdamW and SGD with momentum that update every parameter of a step in a few kernels: ATen's fused
// kernels where this LibTorch has them for the parameters' device (compat::has_fused_optimizers),
// else, for SGD on the CPU, a one-pass kernel of our own (optim/sgd_cpu_kernel.h), else ATen's
// multi-tensor _foreach_ ops. LibTorch's own torch::optim runs about eight kernels per
// parameter and step, which on a GPU is launch overhead the Python optimizers (foreach by default
// on CUDA, fused on request) do not pay. Same arithmetic as torch::optim::AdamW / SGD, tested
// against them (tests/optim/test_optimizers.cpp).
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/sgd.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddpbench {

// Which implementation `optimizer` ("adamw" or "sgd") of this build uses on `device_type`: "fused"
// (ATen's), "one-pass CPU kernel" (SGD on the CPU where ATen has no fused one: optim/sgd_cpu_kernel.h,
// for float32 and float64 parameters) or "foreach".
std::string optimizer_implementation(const std::string& optimizer, c10::DeviceType device_type);

// The tensors an optimizer's state holds now (momentum, moments, step counts): ours, and LibTorch's
// SGD, Adam and AdamW. Nothing for an optimizer whose state this build cannot read.
std::optional<std::vector<torch::Tensor>> optimizer_state_tensors(const torch::optim::Optimizer& optimizer);

// Sets the gradient of every parameter the optimizer steps to none, as PyTorch 2's
// `optimizer.zero_grad()` (set_to_none=True) does on every LibTorch: 1.13's C++ zero_grad() zeroes
// them in place instead, which keeps a whole gradient's memory through the next forward.
void set_gradients_to_none(torch::optim::Optimizer& optimizer);

// Supported: weight decay, no amsgrad. Throws std::invalid_argument for amsgrad.
std::unique_ptr<torch::optim::Optimizer> make_adamw(std::vector<torch::Tensor> parameters,
                                                   const torch::optim::AdamWOptions& options);
// Supported: momentum > 0, dampening, weight decay, nesterov.
std::unique_ptr<torch::optim::Optimizer> make_sgd(std::vector<torch::Tensor> parameters,
                                                 const torch::optim::SGDOptions& options);

}  // namespace ddpbench
