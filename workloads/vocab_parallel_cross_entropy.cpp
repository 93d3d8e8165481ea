#include "workloads/vocab_parallel_cross_entropy.h"

#include <torch/autograd.h>

namespace ddpbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class VocabParallelCrossEntropy : public torch::autograd::Function<VocabParallelCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local_logits, const torch::Tensor& targets,
                               std::int64_t first, const VocabAllReduce* all_reduce) {
    const std::int64_t rows = local_logits.size(0), width = local_logits.size(1);
    const auto logits = local_logits.to(c10::promoteTypes(local_logits.scalar_type(), torch::kFloat));
    // Shifted by each row's maximum over the whole vocabulary, so that no exponential overflows.
    auto row_max = std::get<0>(logits.max(1));
    (*all_reduce)(row_max, VocabReduce::Max);
    const auto shifted = logits - row_max.unsqueeze(1);
    // The target's logit: from the rank whose columns hold it, zero from the others, then summed.
    const auto mine = targets.ge(first).logical_and(targets.lt(first + width));
    const auto column = (targets - first).clamp(0, width - 1);
    auto target_logit = shifted.gather(1, column.unsqueeze(1)).squeeze(1) * mine.to(shifted.scalar_type());
    auto exponentials = shifted.exp();
    auto sum_exp = exponentials.sum(1);
    // One all-reduce for both: [target logits; sums of exponentials].
    auto both = torch::cat({target_logit, sum_exp});
    (*all_reduce)(both, VocabReduce::Sum);
    target_logit = both.narrow(0, 0, rows);
    sum_exp = both.narrow(0, rows, rows);
    const auto loss = (sum_exp.log() - target_logit).mean();
    // Backward's gradient, this rank's columns of softmax - one_hot, kept from here.
    auto softmax = exponentials.div_(sum_exp.unsqueeze(1));
    softmax.scatter_add_(1, column.unsqueeze(1), -mine.to(softmax.scalar_type()).unsqueeze(1));
    ctx->saved_data["grad_logits"] = softmax;
    ctx->saved_data["logits_type"] = static_cast<std::int64_t>(local_logits.scalar_type());
    return loss;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto grad_logits = ctx->saved_data["grad_logits"].toTensor();
    const auto scale = grad_outputs[0].to(grad_logits.scalar_type()) / static_cast<double>(grad_logits.size(0));
    const auto type = static_cast<c10::ScalarType>(ctx->saved_data["logits_type"].toInt());
    return {(grad_logits * scale).to(type), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor vocab_parallel_cross_entropy(const torch::Tensor& local_logits, const torch::Tensor& targets,
                                           std::int64_t first, const VocabAllReduce& all_reduce) {
  TORCH_CHECK(local_logits.dim() == 2 && targets.dim() == 1 && targets.size(0) == local_logits.size(0),
              "vocab_parallel_cross_entropy: logits [rows, width] and targets [rows], got ", local_logits.sizes(),
              " and ", targets.sizes());
  TORCH_CHECK(first >= 0 && local_logits.size(1) >= 1, "vocab_parallel_cross_entropy: an empty or negative share");
  return VocabParallelCrossEntropy::apply(local_logits, targets, first, &all_reduce);
}

}  // namespace ddpbench
