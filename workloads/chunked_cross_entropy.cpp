#include "workloads/chunked_cross_entropy.h"

#include <torch/autograd.h>

#include <algorithm>

namespace ddpbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Log-probabilities, the loss and the weight's gradient are kept in float32 at least (float64 stays
// float64: the parity pass trains in it).
c10::ScalarType accumulate_type(const torch::Tensor& hidden) { return c10::promoteTypes(hidden.scalar_type(), torch::kFloat); }

// The loss is the last thing a step computes and its incoming gradient is one number, so each chunk's
// gradients are taken in forward, while its logits are at hand, and backward only scales them (as
// Liger-Kernel's fused linear cross-entropy does). Recomputing the logits in backward instead cost
// one more [tokens, vocabulary] product and twice the element-wise passes over the fp32 logits: on an
// H200, gpt2's step took 107 ms against PyTorch's eager loop's 76 (docs/results/h200-issue47).
class ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, std::int64_t chunk_rows, bool with_gradients) {
    const std::int64_t rows = hidden.size(0);
    const auto accumulate = accumulate_type(hidden);
    auto total = torch::zeros({}, hidden.options().dtype(accumulate));
    // The gradients of the sum of the rows' losses; backward scales them by its incoming gradient / rows.
    torch::Tensor grad_hidden, grad_weight, product_weight;
    if (with_gradients) {
      grad_hidden = torch::empty(hidden.sizes(), hidden.options().dtype(accumulate));
      grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(accumulate));
    }
    for (std::int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - begin);
      const auto chunk = hidden.narrow(0, begin, n);
      const auto chosen = targets.narrow(0, begin, n).unsqueeze(1);
      // In autocast's type where autocast is on, as a plain matmul would be.
      const auto product = torch::matmul(chunk, weight.t());
      auto log_probabilities = torch::log_softmax(product, 1, accumulate);
      total -= log_probabilities.gather(1, chosen).sum();
      if (!with_gradients) continue;
      // d(loss of a row)/d(its logits) = softmax - one_hot(target), in the products' type for the
      // two products that carry it back to the hidden states and to the weight.
      const auto type = product.scalar_type();
      if (!product_weight.defined()) product_weight = weight.to(type);
      auto probabilities = log_probabilities.exp_();
      probabilities.scatter_add_(1, chosen, torch::full({n, 1}, -1.0, probabilities.options()));
      const auto grad_logits = probabilities.to(type);
      const auto chunk_in_type = chunk.to(type);
      grad_hidden.narrow(0, begin, n).copy_(torch::matmul(grad_logits, product_weight));
      if (type == accumulate) {
        grad_weight.addmm_(grad_logits.t(), chunk_in_type);
      } else {
        grad_weight.add_(torch::matmul(grad_logits.t(), chunk_in_type));  // bf16's products summed in fp32
      }
    }
    if (with_gradients) {
      ctx->saved_data["grad_hidden"] = grad_hidden;
      ctx->saved_data["grad_weight"] = grad_weight;
      ctx->saved_data["hidden_type"] = static_cast<std::int64_t>(hidden.scalar_type());
      ctx->saved_data["weight_type"] = static_cast<std::int64_t>(weight.scalar_type());
    }
    ctx->saved_data["rows"] = rows;
    return total / static_cast<double>(rows);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    TORCH_CHECK(ctx->saved_data.count("grad_hidden") == 1,
                "chunked_linear_cross_entropy: backward through a loss computed without gradients");
    const auto grad_hidden = ctx->saved_data["grad_hidden"].toTensor();
    const auto grad_weight = ctx->saved_data["grad_weight"].toTensor();
    const auto scale = grad_outputs[0].to(grad_hidden.scalar_type()) / static_cast<double>(ctx->saved_data["rows"].toInt());
    const auto hidden_type = static_cast<c10::ScalarType>(ctx->saved_data["hidden_type"].toInt());
    const auto weight_type = static_cast<c10::ScalarType>(ctx->saved_data["weight_type"].toInt());
    return {(grad_hidden * scale).to(hidden_type), (grad_weight * scale).to(weight_type), torch::Tensor(),
            torch::Tensor(), torch::Tensor()};
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
  // Where nothing will be differentiated (evaluation, the harness's loss-only passes), no gradient is taken.
  const bool with_gradients = torch::GradMode::is_enabled() && (hidden.requires_grad() || weight.requires_grad());
  return ChunkedLinearCrossEntropy::apply(hidden, weight, targets, chunk_rows, with_gradients);
}

std::int64_t chunk_rows_for(std::int64_t vocabulary, std::int64_t budget_bytes) {
  return std::max<std::int64_t>(1, budget_bytes / (vocabulary * static_cast<std::int64_t>(sizeof(float))));
}

}  // namespace ddpbench
