#include "collectives/shard_collectives.h"

#include <chrono>

#include "base/errors.h"
#include "compat/c10d_compat.h"
#include "distributed/process_group.h"

namespace ddpbench {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The shard length, after checking that `whole` splits into the group's shards of `part`.
std::int64_t shard_of(const ProcessGroupContext& group, const torch::Tensor& whole, const torch::Tensor& part,
                      const std::string& what) {
  const std::int64_t shard = part.numel();
  if (whole.dim() != 1 || part.dim() != 1 || !whole.is_contiguous() || !part.is_contiguous()) {
    throw CaseFailure(what + ": a shard collective takes flat contiguous buffers");
  }
  if (whole.numel() != shard * group.size()) {
    throw CaseFailure(what + ": " + std::to_string(whole.numel()) + " elements do not split into " +
                      std::to_string(group.size()) + " shards of " + std::to_string(shard) +
                      " (pad with padded_numel)");
  }
  if (whole.scalar_type() != part.scalar_type() || whole.device() != part.device()) {
    throw CaseFailure(what + ": the whole buffer and the shard differ in dtype or device");
  }
  if (group.kind() == DeviceKind::Cpu && whole.scalar_type() == torch::kBFloat16 && !compat::gloo_sends_bf16()) {
    throw CaseFailure(what + ": this LibTorch's Gloo (1.x) cannot send bf16 tensors; LibTorch 2.x's can");
  }
  return shard;
}

// One ring step: this rank's chunk to `to`, its neighbour's from `from`, the receive posted before
// the send. Over Gloo's TCP transport two ranks that each posted a send and then a receive swapped
// 5.8 MB in 80-95 ms over a 1000 Mbit/s link (two network namespaces, tc tbf on both ends), where
// the line rate gives 47 ms; receive first, the same swap took 47 ms, the rate at which Gloo's own
// all-reduce moves the same bytes (LibTorch 1.13, 2026-11-26). Until then the ring's collectives
// ran at about half the link's rate.
void exchange(ProcessGroupContext& group, const torch::Tensor& to_send, int to, const torch::Tensor& to_receive,
              int from, int tag, const std::string& what) {
  auto received = group.recv_async(to_receive, from, tag);
  auto sent = group.send_async(to_send, to, tag);
  group.wait(received, what);
  group.wait(sent, what);
}

// Chunk k (taken modulo the world size) of a flat buffer of `world` chunks.
torch::Tensor chunk(const torch::Tensor& flat, int k, int world, std::int64_t shard) {
  return flat.narrow(0, static_cast<std::int64_t>(((k % world) + world) % world) * shard, shard);
}

// What both collectives share: the checks, one rank alone, the bytes sent and the time. `cuda`
// starts NCCL's collective; `ring(n, r, shard)` is the Gloo ring.
template <typename Cuda, typename Ring>
CollectiveTraffic shard_collective(ProcessGroupContext& group, const torch::Tensor& input, const torch::Tensor& output,
                                   const torch::Tensor& whole, const torch::Tensor& part, const std::string& what,
                                   Cuda cuda, Ring ring) {
  const auto start = Clock::now();
  const std::int64_t shard = shard_of(group, whole, part, what);
  const int n = group.size();
  CollectiveTraffic traffic;
  torch::NoGradGuard no_grad;
  if (n == 1) {
    output.copy_(input);
  } else {
    traffic.bytes_sent = static_cast<std::int64_t>(n - 1) * shard * static_cast<std::int64_t>(input.element_size());
    if (group.kind() == DeviceKind::Cuda) {
      group.wait(cuda(), what);
    } else {
      ring(n, group.rank(), shard);
    }
  }
  traffic.seconds = seconds_since(start);
  return traffic;
}

}  // namespace

std::int64_t padded_numel(std::int64_t numel, int world) { return (numel + world - 1) / world * world; }

CollectiveTraffic reduce_scatter(ProcessGroupContext& group, const torch::Tensor& input, const torch::Tensor& output,
                                 const std::string& what, int tag) {
  return shard_collective(
      group, input, output, /*whole=*/input, /*part=*/output, what,
      [&] { return group.reduce_scatter_base_async(output, input); },
      [&](int n, int r, std::int64_t shard) {
        // At step s this rank passes on chunk r-s-1, which it has summed so far, and adds the chunk
        // r-s-2 its left neighbour has summed into its own. After N-1 steps chunk r holds every
        // rank's contribution. `output` (one chunk) is the receive buffer, so that a unit's
        // reduce-scatter adds no chunk-sized temporary to the step's peak, and the last step adds
        // this rank's chunk r into it (IEEE addition commutes: the same sums). When `output` is
        // input's chunk r itself (zero1's gradient chunks are views of the bucket), it cannot be
        // written before the end, and a temporary receives.
        const bool output_in_input = output.is_alias_of(input);
        const torch::Tensor incoming = output_in_input ? torch::empty_like(output) : output;
        for (int s = 0; s < n - 1; ++s) {
          exchange(group, chunk(input, r - s - 1, n, shard), (r + 1) % n, incoming, (r - 1 + n) % n, tag, what);
          if (s + 1 < n - 1 || output_in_input) {
            chunk(input, r - s - 2, n, shard).add_(incoming);
          } else {
            output.add_(chunk(input, r, n, shard));
          }
        }
        if (output_in_input) output.copy_(chunk(input, r, n, shard));
      });
}

CollectiveTraffic all_gather(ProcessGroupContext& group, const torch::Tensor& input, const torch::Tensor& output,
                             const std::string& what, int tag) {
  return shard_collective(
      group, input, output, /*whole=*/output, /*part=*/input, what,
      [&] { return group.allgather_base_async(output, input); },
      [&](int n, int r, std::int64_t shard) {
        // At step s this rank passes on chunk r-s (its own first, then what it was given) and
        // receives chunk r-s-1 from its left neighbour, straight into place.
        chunk(output, r, n, shard).copy_(input);
        for (int s = 0; s < n - 1; ++s) {
          exchange(group, chunk(output, r - s, n, shard), (r + 1) % n, chunk(output, r - s - 1, n, shard),
                   (r - 1 + n) % n, tag, what);
        }
      });
}

}  // namespace ddpbench
