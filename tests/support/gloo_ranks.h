#pragma once
// Ranks as threads of the test process, each with its own real Gloo process group over one
// in-memory store: the collectives' and the sharded buckets' tests run world 2 to 4 this way.
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <functional>
#include <future>
#include <vector>

#include "distributed/process_group.h"

namespace ddpbench::testing {

// Runs `body(group)` on `world` ranks; rank 0 on the calling thread. Rethrows a rank's exception.
inline void on_gloo_ranks(int world, const std::function<void(ProcessGroupContext&)>& body,
                          std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  auto rank = [&](int r) {
    ProcessGroupContext group(store, r, world, DeviceKind::Cpu, timeout);
    body(group);
  };
  std::vector<std::future<void>> others;
  for (int r = 1; r < world; ++r) others.push_back(std::async(std::launch::async, rank, r));
  rank(0);
  for (auto& f : others) f.get();
}

}  // namespace ddpbench::testing
