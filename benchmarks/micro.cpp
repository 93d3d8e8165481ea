// ddpbench-micro: the ceilings that training-time communication is read against, measured with
// Google Benchmark: DataParallel's scatter, gather, replicate copy and reduce-add across the CPU
// virtual devices; DDP's bucket flatten/unflatten copies; and Gloo all-reduce between two ranks
// in this process over 4 KiB to 64 MiB, with nccl-tests' algbw and busbw.
//
//   ddpbench-micro [--benchmark_filter=...] [--benchmark_out=micro.json --benchmark_out_format=json]
#include <benchmark/benchmark.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>

#include "base/build_info.h"
#include "devices/counting_allocator.h"
#include "devices/device_transfer.h"
#include "compat/torch_compat.h"

namespace {

using ddpbench::DeviceSet;
using ddpbench::DeviceKind;

constexpr int kDevices = 2;
const DeviceSet& devices() {
  static const DeviceSet set(DeviceKind::Cpu, kDevices, 1);
  return set;
}

torch::Tensor floats(std::int64_t bytes) { return torch::randn({bytes / 4}); }

void set_bytes(benchmark::State& state, std::int64_t bytes) {
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * bytes);
  state.counters["bytes"] = static_cast<double>(bytes);
}

void BM_Scatter(benchmark::State& state) {
  const auto batch = floats(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(ddpbench::scatter(batch, devices(), kDevices));
  set_bytes(state, state.range(0));
}

void BM_Gather(benchmark::State& state) {
  const auto parts = ddpbench::scatter(floats(state.range(0)), devices(), kDevices);
  for (auto _ : state) benchmark::DoNotOptimize(ddpbench::gather(parts, devices(), 0));
  set_bytes(state, state.range(0));
}

// DataParallel's replicate: the master's parameters copied into a replica on another device.
void BM_ReplicateCopy(benchmark::State& state) {
  const auto master = floats(state.range(0));
  auto replica = torch::empty_like(master);
  for (auto _ : state) replica.copy_(master);
  set_bytes(state, state.range(0));
}

// DataParallel's reduce: each replica's gradient added into the master's.
void BM_ReduceAdd(benchmark::State& state) {
  auto master = floats(state.range(0));
  const auto replica = floats(state.range(0));
  for (auto _ : state) master.add_(replica);
  set_bytes(state, state.range(0));
}

// DDP's bucket copies: the gradients of mlp's layers (weights and biases) into one flat bucket and back.
std::vector<torch::Tensor> mlp_gradients() {
  return {torch::randn({1024, 784}), torch::randn({1024}), torch::randn({1024, 1024}), torch::randn({1024}),
          torch::randn({1024, 1024}), torch::randn({1024}), torch::randn({10, 1024}), torch::randn({10})};
}

std::int64_t total_bytes(const std::vector<torch::Tensor>& ts) {
  std::int64_t n = 0;
  for (const auto& t : ts) n += t.numel() * 4;
  return n;
}

void BM_BucketFlatten(benchmark::State& state) {
  const auto grads = mlp_gradients();
  auto bucket = torch::empty({total_bytes(grads) / 4});
  for (auto _ : state) {
    std::int64_t offset = 0;
    for (const auto& g : grads) {
      bucket.narrow(0, offset, g.numel()).copy_(g.reshape({-1}));
      offset += g.numel();
    }
  }
  set_bytes(state, total_bytes(grads));
}

void BM_BucketUnflatten(benchmark::State& state) {
  auto grads = mlp_gradients();
  const auto bucket = torch::randn({total_bytes(grads) / 4});
  for (auto _ : state) {
    std::int64_t offset = 0;
    for (auto& g : grads) {
      g.view({-1}).copy_(bucket.narrow(0, offset, g.numel()));
      offset += g.numel();
    }
  }
  set_bytes(state, total_bytes(grads));
}

// Two Gloo ranks in this process over loopback: rank 0 runs in the benchmark's thread, rank 1 in
// a helper that performs one all-reduce of the same size for each one rank 0 starts.
class LocalGlooPair {
 public:
  LocalGlooPair() {
    auto store = c10::make_intrusive<c10d::HashStore>();
    std::thread peer([&] { groups_[1] = make_group(store, 1); });
    groups_[0] = make_group(store, 0);
    peer.join();
    helper_ = std::thread([this] { serve(); });
  }
  ~LocalGlooPair() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    helper_.join();
  }
  void allreduce(std::int64_t bytes) {
    if (buffers_[0].numel() * 4 != bytes) {
      buffers_[0] = floats(bytes);
      buffers_[1] = floats(bytes);
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++requested_;
    }
    cv_.notify_all();
    std::vector<at::Tensor> tensors{buffers_[0]};
    groups_[0]->allreduce(tensors)->wait();
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [&] { return served_ == requested_; });
  }

 private:
  static c10::intrusive_ptr<c10d::ProcessGroupGloo> make_group(const c10::intrusive_ptr<c10d::Store>& store, int rank) {
    auto options = c10d::ProcessGroupGloo::Options::create();
    options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, 2, options);
  }
  void serve() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return stopping_ || requested_ > served_; });
        if (stopping_) return;
      }
      std::vector<at::Tensor> tensors{buffers_[1]};
      groups_[1]->allreduce(tensors)->wait();
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++served_;
      }
      cv_.notify_all();
    }
  }

  c10::intrusive_ptr<c10d::ProcessGroupGloo> groups_[2];
  torch::Tensor buffers_[2] = {torch::empty({0}), torch::empty({0})};
  std::thread helper_;
  std::mutex mutex_;
  std::condition_variable cv_;
  long requested_ = 0, served_ = 0;
  bool stopping_ = false;
};

void BM_GlooAllreduce(benchmark::State& state) {
  static LocalGlooPair pair;
  const std::int64_t bytes = state.range(0);
  pair.allreduce(bytes);  // sizes the buffers outside the timed loop
  for (auto _ : state) pair.allreduce(bytes);
  constexpr double ranks = 2;
  // nccl-tests: algbw = bytes / time; busbw = algbw * 2 (n - 1) / n for all-reduce.
  state.counters["algbw"] = benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["busbw"] = benchmark::Counter(static_cast<double>(bytes) * 2 * (ranks - 1) / ranks,
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.counters["bytes"] = static_cast<double>(bytes);
}

constexpr std::int64_t kMin = 4 << 10, kMax = 64 << 20;
BENCHMARK(BM_Scatter)->RangeMultiplier(16)->Range(kMin, kMax)->UseRealTime();
BENCHMARK(BM_Gather)->RangeMultiplier(16)->Range(kMin, kMax)->UseRealTime();
BENCHMARK(BM_ReplicateCopy)->RangeMultiplier(16)->Range(kMin, kMax)->UseRealTime();
BENCHMARK(BM_ReduceAdd)->RangeMultiplier(16)->Range(kMin, kMax)->UseRealTime();
BENCHMARK(BM_BucketFlatten)->UseRealTime();
BENCHMARK(BM_BucketUnflatten)->UseRealTime();
BENCHMARK(BM_GlooAllreduce)->RangeMultiplier(4)->Range(kMin, kMax)->UseRealTime();

}  // namespace

int main(int argc, char** argv) {
  at::set_num_threads(1);
  ddpbench::CpuMemoryCounter::install();
  // The report scripts recognise this file by these keys.
  benchmark::AddCustomContext("ddpbench_micro", ddpbench::build_version());
  benchmark::AddCustomContext("ddpbench_git_sha", ddpbench::build_git_sha());
  benchmark::AddCustomContext("torch_version", ddpbench::compat::torch_version());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
