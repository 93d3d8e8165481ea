#pragma once
// Moving batches between the devices of a DeviceSet, as DataParallel does. On CUDA these are real
// copies between devices; on CPU virtual devices a copy is made into the target device's memory
// (charged to it by the counting allocator), so the bytes and the memory pile-up are the same.
#include <torch/types.h>

#include <vector>

#include "devices/device_set.h"

namespace ddpbench {

// A copy of `tensor` on device `index`.
torch::Tensor copy_to_device(const torch::Tensor& tensor, const DeviceSet& devices, int index);

// Sizes of `count` parts of `total` that differ by at most one, larger first (torch::chunk can
// return fewer parts than asked, e.g. 4 over 3 gives 2 + 2).
std::vector<std::int64_t> even_split(std::int64_t total, int count);

// Splits along dimension 0 into `count` parts of even_split sizes, part i copied to device i.
// Throws if a part would be empty.
std::vector<torch::Tensor> scatter(const torch::Tensor& tensor, const DeviceSet& devices, int count);

// Concatenates `parts` (part i on device i) along dimension 0 on device `target`.
torch::Tensor gather(const std::vector<torch::Tensor>& parts, const DeviceSet& devices, int target);

}  // namespace ddpbench
