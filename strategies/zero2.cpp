// `zero2`: ZeRO stage 2, gradients sharded too: as zero1, but each bucket's full gradient buffer is
// freed the moment it is reduce-scattered, so no full gradient buffer outlives backward
// (zero_data_parallel.h).
#include "strategies/zero_data_parallel.h"

namespace ddpbench {

DDPBENCH_REGISTER_STRATEGY({"zero2", "ZeRO-2: optimizer state and gradients sharded; each bucket freed once reduce-scattered",
                            6, /*uses_all_devices=*/true, [] { return make_zero_strategy(2); }, /*multi_process=*/true});

}  // namespace ddpbench
