#pragma once
// Which parameters share a communication bucket, for every bucketed strategy (ddp's all-reduce,
// zero1's and zero2's reduce-scatter): reverse registration order, the order backward produces
// gradients, so the first bucket is ready first; a bucket closes at its size cap or where the dtype
// or device changes (one flat buffer holds one kind).
#include <torch/types.h>

#include <cstddef>
#include <vector>

namespace ddpbench {

struct BucketCaps {
  double cap_mb = 25;       // --bucket-mb: largest bucket, in MiB
  double first_cap_mb = 1;  // the first bucket (the last layers) is small so communication starts early
};

// Parameter indices (registration order) of each bucket, in launch order. Throws
// std::invalid_argument for no parameters.
std::vector<std::vector<std::size_t>> plan_buckets(const std::vector<torch::Tensor>& parameters, BucketCaps caps);

}  // namespace ddpbench
