#pragma once
// Reduce-scatter and all-gather of one flat buffer across the ranks of a group, the collectives of
// the sharded strategies (zero1, zero2, fsdp), costing what NCCL's ring costs: each rank sends
// (N-1)/N of the payload. On CUDA they are NCCL's own. On CPU they are rings of Gloo send/recv:
// LibTorch's Gloo has neither in 1.13, and 2.x's reduce-scatter is an all-reduce plus a slice, which
// moves twice the bytes (and always sums, pytorch#162338), so measuring it would misstate ZeRO-2
// and FSDP on CPU (SHARDED.md).
#include <torch/types.h>

#include <cstdint>
#include <string>

namespace ddpbench {

class ProcessGroupContext;

// What one collective cost this rank.
struct CollectiveTraffic {
  std::int64_t bytes_sent = 0;  // (N-1)/N of the payload, as NCCL's ring
  double seconds = 0;           // from the call until this rank's part was done
};

// The length a flat buffer of `numel` elements is padded to so that it splits into `world` equal
// shards (FSDP pads each parameter on dim 0 the same way).
std::int64_t padded_numel(std::int64_t numel, int world);

// Sums `input` (world x shard elements, one dtype and device) over the ranks; this rank's shard, the
// sum of every rank's chunk number rank(), lands in `output` (shard elements). `input` is the
// ring's working buffer: its contents are unspecified afterwards. Every rank calls it alike (same
// sizes, same `tag` where several run at once). Throws CommFailure (a peer died or timed out) or
// CaseFailure (sizes that do not split, a dtype the backend cannot send: bf16 on 1.13's Gloo).
CollectiveTraffic reduce_scatter(ProcessGroupContext& group, const torch::Tensor& input, const torch::Tensor& output,
                                 const std::string& what, int tag = 0);

// Every rank's `input` (shard elements) into `output` (world x shard), rank r's at chunk r.
CollectiveTraffic all_gather(ProcessGroupContext& group, const torch::Tensor& input, const torch::Tensor& output,
                             const std::string& what, int tag = 0);

}  // namespace ddpbench
