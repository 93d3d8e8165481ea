// `zero1`: ZeRO stage 1, optimizer state sharded: each rank steps 1/N of the parameters, gradients
// are reduce-scattered in buckets while backward runs, and the updated parameters all-gathered after
// the step (zero_data_parallel.h). Each rank keeps the full gradient buffers between steps.
#include "strategies/zero_data_parallel.h"

namespace ddpbench {

DDPBENCH_REGISTER_STRATEGY({"zero1", "ZeRO-1: optimizer state sharded; gradients reduce-scattered during backward, parameters all-gathered",
                            5, /*uses_all_devices=*/true, [] { return make_zero_strategy(1); }, /*multi_process=*/true});

}  // namespace ddpbench
