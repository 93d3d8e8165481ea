#pragma once
// What zero1 and zero2 share: ZeRO's stages 1 and 2 (Rajbhandari et al., SC'20) as ranks in
// processes, exactly as ddp runs them. Each rank holds the whole model and trains on its shard of
// the global batch; its optimizer holds state for 1/N of the parameters only and steps only those
// (ShardedBuckets). Per step: forward; backward, each gradient bucket reduce-scattered as soon as
// it is complete; the optimizer on this rank's chunks; the updated chunks all-gathered back. The
// stage decides whether the full gradient buffers live on between steps (1) or are freed as soon
// as they are reduce-scattered (2).
#include <memory>

#include "strategies/strategy.h"

namespace ddpbench {

std::unique_ptr<Strategy> make_zero_strategy(int stage);

}  // namespace ddpbench
