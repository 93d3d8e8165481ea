#pragma once
// Where the harness puts each step's batch before the strategy sees it (--data-path):
//   host:     the batch stays in host memory; the strategy copies it to its device inside its step
//             (pinned with --pin-memory), as a plain PyTorch loop does.
//   prefetch: the batch of step k+1 is copied to the strategy's device while step k trains, from
//             pinned host memory on a stream of its own, as DataLoader(pin_memory=True) with
//             .to(non_blocking=True) on a side stream does in PyTorch: the data phase keeps only
//             what the copy did not hide. The default on CUDA.
//   device:   the whole dataset lives on the strategy's device and batches are gathered there: no
//             host in the loop at all (--data-on-device). The dataset's bytes count in the peak.
// Strategies without one batch device (dp and dp-loss-in-model scatter from the host, hogwild's
// processes read shared host memory) run the host path, and the JSON says which path each case ran.
#include <memory>
#include <optional>
#include <string>

#include "data/data_loader.h"

namespace ddpbench {

enum class DataPath { Auto, Host, Prefetch, Device };
std::string to_string(DataPath path);
// Throws UsageError naming `flag` for anything but auto, host, prefetch or device.
DataPath parse_data_path(const std::string& flag, const std::string& value);

// The batches of `loader`, each copied to `device` one step ahead. On CUDA the copy runs on a pool
// stream and the host waits for it before handing the batch out, so a strategy may read it from any
// stream. On a CPU virtual device the copy is a copy charged to virtual device `cpu_device_index`
// (the counting allocator's), made a step ahead too: the same code path without the overlap.
class BatchPrefetcher {
 public:
  BatchPrefetcher(BatchLoader& loader, c10::Device device, int cpu_device_index);
  // This step's batch on the device, complete; starts copying the next one.
  Batch next();

 private:
  struct InFlight {
    Batch host;    // kept alive until its copy has completed
    Batch device;
    std::shared_ptr<void> copied;  // CUDA event after the copy; empty on CPU
  };
  InFlight start(Batch host);

  BatchLoader& loader_;
  c10::Device device_;
  int cpu_device_index_;
  std::shared_ptr<void> stream_;
  std::optional<InFlight> ahead_;
};

}  // namespace ddpbench
