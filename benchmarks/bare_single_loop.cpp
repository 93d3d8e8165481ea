// The `mlp` training loop in bare LibTorch, with no harness around it: the floor that ddpbench's
// `single` strategy is compared against (benchmarks/compare_single.py). Same model, loss, optimizer,
// batch and thread count; batches are contiguous slices of a pre-generated dataset.
//   bare_single_loop STEPS WARMUP BATCH THREADS  ->  one JSON line: {"step_ms": [...]}
#include <ATen/Parallel.h>
#include <torch/nn/functional/loss.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/sgd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

struct Mlp : torch::nn::Module {
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr}, fc4{nullptr};
  Mlp() {
    fc1 = register_module("fc1", torch::nn::Linear(784, 1024));
    fc2 = register_module("fc2", torch::nn::Linear(1024, 1024));
    fc3 = register_module("fc3", torch::nn::Linear(1024, 1024));
    fc4 = register_module("fc4", torch::nn::Linear(1024, 10));
  }
  torch::Tensor forward(const torch::Tensor& x) {
    return fc4(torch::relu(fc3(torch::relu(fc2(torch::relu(fc1(x)))))));
  }
};

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bare_single_loop STEPS WARMUP BATCH THREADS\n");
    return 2;
  }
  const int steps = std::atoi(argv[1]), warmup = std::atoi(argv[2]);
  const int64_t batch = std::atoll(argv[3]);
  at::set_num_threads(std::atoi(argv[4]));
  torch::manual_seed(42);
  auto model = std::make_shared<Mlp>();
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const int64_t batches = 32;
  auto inputs = torch::randn({batches * batch, 784});
  auto targets = torch::randint(0, 10, {batches * batch}, torch::kInt64);

  std::printf("{\"step_ms\": [");
  for (int i = 0; i < warmup + steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const int64_t b = i % batches;
    auto x = inputs.narrow(0, b * batch, batch);
    auto y = targets.narrow(0, b * batch, batch);
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    optimizer.step();
    optimizer.zero_grad();
    const auto stop = std::chrono::steady_clock::now();
    if (i >= warmup) {
      std::printf("%s%.6f", i > warmup ? ", " : "", std::chrono::duration<double, std::milli>(stop - start).count());
    }
  }
  std::printf("]}\n");
  return 0;
}
