#pragma once
// Mean cross-entropy over logits split by vocabulary over the ranks of a tensor-parallel group
// (Megatron's vocabulary-parallel cross-entropy): rank r holds columns [first, first + width) of every
// row's logits, and no rank ever holds a whole row. Three all-reduces of one number a row make the
// loss (each row's maximum, its target's logit from the rank that holds it, its sum of
// exponentials); backward needs none: a rank's gradient is its columns of softmax - one_hot.
// The all-reduces are the caller's (tp counts and times them as its other collectives), so this file
// holds arithmetic only.
#include <torch/types.h>

#include <cstdint>
#include <functional>

namespace ddpbench {

enum class VocabReduce { Sum, Max };
// In place over the group: `values` summed, or their element-wise maximum.
using VocabAllReduce = std::function<void(torch::Tensor& values, VocabReduce op)>;

// local_logits: [rows, width], this rank's columns, starting at vocabulary index `first`; targets:
// [rows] int64, indices into the whole vocabulary. The loss is float32 (float64 for float64 logits),
// the same on every rank; the gradient flows to local_logits only.
torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& targets,
                                           std::int64_t first, const VocabAllReduce& all_reduce);

}  // namespace ddpbench
