#pragma once
// Ranks as threads of the test process, each with its own real Gloo process group over one
// in-memory store: the collectives' and the sharded buckets' tests run world 2 to 4 this way.
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <exception>
#include <thread>
#include <functional>
#include <future>
#include <vector>

#include "distributed/process_group.h"

namespace ddpbench::testing {

// Runs `body(group)` on `world` ranks; rank 0 on the calling thread. Rethrows a rank's exception.
// No rank's group is destroyed before every rank's body is done (or failed): a rank that finished
// early (a check that throws before any collective) would otherwise close its connections while
// another rank is still connecting, and that rank fails with Gloo's "Connection closed by peer".
inline void on_gloo_ranks(int world, const std::function<void(ProcessGroupContext&)>& body,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank = [&](int r) {
    ProcessGroupContext group(store, r, world, DeviceKind::Cpu, timeout);
    std::exception_ptr failure;
    try {
      body(group);
    } catch (...) {
      failure = std::current_exception();
    }
    // Every rank's body done, or the timeout and a margin: a hung rank fails its own test.
    store->add("on_gloo_ranks/done", 1);
    const auto deadline = std::chrono::steady_clock::now() + timeout + std::chrono::seconds(10);
    while (store->add("on_gloo_ranks/done", 0) < world && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (failure) std::rethrow_exception(failure);
  };
  std::vector<std::future<void>> others;
  for (int r = 1; r < world; ++r) others.push_back(std::async(std::launch::async, rank, r));
  rank(0);
  for (auto& f : others) f.get();
}

}  // namespace ddpbench::testing
