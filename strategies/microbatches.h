#pragma once
// --grad-accum K (docs/memory.md): a step's batch (this rank's or this process's part of it) cut
// into K micro-batches, each run through forward and backward in turn with the gradients summed,
// and one optimizer step after the last. Each micro-batch's mean loss enters backward times its
// weight, its rows over the batch's, so the summed gradient and loss are the whole batch's mean's:
// the step equals `single` on the whole batch, also where the rows do not divide evenly.
#include <vector>

#include "data/data_loader.h"

namespace ddpbench {

struct MicroBatch {
  Batch batch;   // views of the batch's rows, in order
  double weight = 1;
};

// `count` micro-batches of `batch`'s rows in order, the first ones a row larger where they do not
// divide; one (the batch itself, weight 1) for a count of 1. Throws CaseFailure when the batch has
// fewer rows than `count` (a rank's share of a batch the CLI let through).
std::vector<MicroBatch> split_microbatches(const Batch& batch, int count);

}  // namespace ddpbench
