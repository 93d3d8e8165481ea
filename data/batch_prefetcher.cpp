#include "data/batch_prefetcher.h"

#include "devices/counting_allocator.h"
#include "base/errors.h"
#include "compat/torch_compat.h"

namespace ddpbench {

std::string to_string(DataPath path) {
  switch (path) {
    case DataPath::Auto: return "auto";
    case DataPath::Host: return "host";
    case DataPath::Prefetch: return "prefetch";
    case DataPath::Device: return "device";
  }
  return "auto";
}

DataPath parse_data_path(const std::string& flag, const std::string& value) {
  for (auto path : {DataPath::Auto, DataPath::Host, DataPath::Prefetch, DataPath::Device}) {
    if (value == to_string(path)) return path;
  }
  throw UsageError(flag + ": unknown data path '" + value + "' (expected auto, host, prefetch or device)");
}

BatchPrefetcher::BatchPrefetcher(BatchLoader& loader, c10::Device device, int cpu_device_index)
    : loader_(loader), device_(device), cpu_device_index_(cpu_device_index) {
  if (device_.is_cuda()) stream_ = compat::cuda_pool_stream(device_.index());
}

BatchPrefetcher::InFlight BatchPrefetcher::start(Batch host) {
  InFlight f;
  f.device.step = host.step;
  f.device.epoch = host.epoch;
  if (device_.is_cuda()) {
    // The batch's memory comes from this stream's pool and is read on the step's streams; the
    // harness synchronises the device at the end of every step, before the batch is freed.
    auto on_side_stream = compat::use_cuda_stream(stream_);
    f.device.inputs = host.inputs.to(device_, /*non_blocking=*/true);
    f.device.targets = host.targets.to(device_, /*non_blocking=*/true);
    f.copied = compat::cuda_record_event(device_.index());
  } else {
    CpuMemoryCounter::DeviceScope on_device(cpu_device_index_);
    f.device.inputs = host.inputs.clone();
    f.device.targets = host.targets.clone();
  }
  f.host = std::move(host);
  return f;
}

Batch BatchPrefetcher::next() {
  if (!ahead_) ahead_ = start(loader_.next());
  InFlight now = std::move(*ahead_);
  ahead_.reset();
  compat::cuda_wait_event(now.copied);  // what the copy did not hide is the data phase's
  ahead_ = start(loader_.next());
  return std::move(now.device);
}

}  // namespace ddpbench
