#include "strategies/microbatches.h"

#include <string>

#include "base/errors.h"

namespace ddpbench {

std::vector<MicroBatch> split_microbatches(const Batch& batch, int count) {
  if (count <= 1) return {MicroBatch{batch, 1.0}};
  const std::int64_t rows = batch.inputs.size(0);
  if (rows < count) {
    throw CaseFailure("--grad-accum " + std::to_string(count) + ": a part of the batch has " + std::to_string(rows) +
                      " rows, fewer than the micro-batches it must be cut into");
  }
  std::vector<MicroBatch> out;
  std::int64_t start = 0;
  for (int k = 0; k < count; ++k) {
    const std::int64_t size = rows / count + (k < rows % count ? 1 : 0);
    MicroBatch mb;
    mb.batch = batch;
    mb.batch.inputs = batch.inputs.narrow(0, start, size);
    mb.batch.targets = batch.targets.narrow(0, start, size);
    mb.weight = static_cast<double>(size) / static_cast<double>(rows);
    out.push_back(std::move(mb));
    start += size;
  }
  return out;
}

}  // namespace ddpbench
