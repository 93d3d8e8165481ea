#include "workloads/chunked_cross_entropy.h"

#include <torch/autograd.h>

#include <algorithm>

namespace ddpbench {
namespace {

using torch::autograd::AutogradContext;

// Logits, log-sum-exp and the weight's gradient are kept in float32 at least (float64 stays float64:
// the parity pass trains in it).
c10::ScalarType accumulate_type(const torch::Tensor& hidden) { return c10::promoteTypes(hidden.scalar_type(), torch::kFloat); }
using torch::autograd::variable_list;

class ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, std::int64_t chunk_rows) {
    const std::int64_t rows = hidden.size(0);
    const auto accumulate = accumulate_type(hidden);
    auto log_sum_exp = torch::empty({rows}, hidden.options().dtype(accumulate));
    auto total = torch::zeros({}, hidden.options().dtype(accumulate));
    // The type the chunk products ran in (autocast's, or the inputs'): backward, which runs
    // outside autocast, recomputes them in the same type.
    auto product_type = hidden.scalar_type();
    for (std::int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - begin);
      const auto product = torch::matmul(hidden.narrow(0, begin, n), weight.t());
      product_type = product.scalar_type();
      const auto logits = product.to(accumulate);
      const auto lse = logits.logsumexp(1);
      const auto picked = logits.gather(1, targets.narrow(0, begin, n).unsqueeze(1)).squeeze(1);
      total += (lse - picked).sum();
      log_sum_exp.narrow(0, begin, n).copy_(lse);
    }
    ctx->save_for_backward({hidden, weight, targets, log_sum_exp});
    ctx->saved_data["chunk_rows"] = chunk_rows;
    ctx->saved_data["product_type"] = static_cast<std::int64_t>(product_type);
    return total / static_cast<double>(rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const auto& hidden = saved[0];
    const auto& weight = saved[1];
    const auto& targets = saved[2];
    const auto& log_sum_exp = saved[3];
    const std::int64_t chunk_rows = ctx->saved_data["chunk_rows"].toInt();
    const auto product_type = static_cast<c10::ScalarType>(ctx->saved_data["product_type"].toInt());
    const std::int64_t rows = hidden.size(0);
    // d(mean loss)/d(logit) = (softmax - one_hot(target)) / rows, times the incoming gradient.
    const auto accumulate = accumulate_type(hidden);
    const auto scale = grad_outputs[0].to(accumulate) / static_cast<double>(rows);
    const auto w = weight.to(product_type);
    auto grad_hidden = torch::empty_like(hidden);
    auto grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(accumulate));
    for (std::int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - begin);
      const auto h = hidden.narrow(0, begin, n).to(product_type);
      auto probabilities = (torch::matmul(h, w.t()).to(accumulate) - log_sum_exp.narrow(0, begin, n).unsqueeze(1)).exp_();
      probabilities.scatter_add_(1, targets.narrow(0, begin, n).unsqueeze(1),
                                 torch::full({n, 1}, -1.0, probabilities.options()));
      const auto grad_logits = (probabilities * scale).to(product_type);
      grad_hidden.narrow(0, begin, n).copy_(torch::matmul(grad_logits, w));
      grad_weight += torch::matmul(grad_logits.t(), h).to(accumulate);
    }
    return {grad_hidden, grad_weight.to(weight.scalar_type()), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, std::int64_t chunk_rows) {
  TORCH_CHECK(hidden.dim() == 2 && weight.dim() == 2 && hidden.size(1) == weight.size(1),
              "chunked_linear_cross_entropy: hidden [rows, width] and weight [vocabulary, width], got ",
              hidden.sizes(), " and ", weight.sizes());
  TORCH_CHECK(targets.dim() == 1 && targets.size(0) == hidden.size(0), "chunked_linear_cross_entropy: targets [rows]");
  TORCH_CHECK(chunk_rows >= 1, "chunked_linear_cross_entropy: chunk_rows must be at least 1");
  return ChunkedLinearCrossEntropy::apply(hidden, weight, targets, chunk_rows);
}

std::int64_t chunk_rows_for(std::int64_t vocabulary, std::int64_t budget_bytes) {
  return std::max<std::int64_t>(1, budget_bytes / (vocabulary * static_cast<std::int64_t>(sizeof(float))));
}

}  // namespace ddpbench
