#include "workloads/chunked_cross_entropy.h"

#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>

#include <algorithm>
#include <limits>

#include "compat/torch_compat.h"

namespace ddpbench {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Log-probabilities, the loss and the weight's gradient are kept in float32 at least (float64 stays
// float64: the parity pass trains in it).
c10::ScalarType accumulate_type(const torch::Tensor& hidden) { return c10::promoteTypes(hidden.scalar_type(), torch::kFloat); }

// The type the chunk products run in: autocast's where autocast is on and would cast these inputs
// (float32 ones; it leaves float64 alone), else the inputs' own, as a plain matmul would.
c10::ScalarType product_type(const torch::Tensor& hidden, const torch::Tensor& weight) {
  const auto autocast = compat::autocast_dtype(hidden.device().type());
  const bool has_double = hidden.scalar_type() == torch::kDouble || weight.scalar_type() == torch::kDouble;
  if (autocast && !has_double) return *autocast;
  return c10::promoteTypes(hidden.scalar_type(), weight.scalar_type());
}

// Rows of the weight as the products see it: the vocabulary rounded up to a multiple of 64 with
// zero rows (nanoGPT pads GPT-2's 50257 to 50304 for the same reason). A product's rows are as long
// as the vocabulary, and at an odd length cuBLAS falls back to unaligned kernels: on an H200 the
// three [16384 x 768] x [768 x 50257] bf16 products of a step took 32 ms, 95 TFLOP/s
// (benchmarks/gpt2_loss_paths.py, docs/results/h200-issue47-visit2). The padded columns' logits are
// set to -inf, so they change neither the loss nor any gradient.
constexpr std::int64_t kPaddedRows = 64;

// The loss is the last thing a step computes and its incoming gradient is one number, so each chunk's
// gradients are taken in forward, while its logits are at hand, and backward only scales them (as
// Liger-Kernel's fused linear cross-entropy does). Recomputing the logits in backward instead cost
// one more [tokens, vocabulary] product and twice the element-wise passes over the fp32 logits: on an
// H200, gpt2's step took 107 ms against PyTorch's eager loop's 76, and 82 ms after this change
// (docs/results/h200-issue47, h200-issue47-visit2).
class ChunkedLinearCrossEntropy : public torch::autograd::Function<ChunkedLinearCrossEntropy> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& hidden, const torch::Tensor& weight,
                               const torch::Tensor& targets, std::int64_t chunk_rows, bool with_gradients) {
    const std::int64_t rows = hidden.size(0), vocabulary = weight.size(0);
    const std::int64_t padded = (vocabulary + kPaddedRows - 1) / kPaddedRows * kPaddedRows;
    const auto accumulate = accumulate_type(hidden);
    const auto type = product_type(hidden, weight);
    // The types are explicit from here on: autocast would otherwise widen each chunk's products to
    // float32 in a pass of its own before log_softmax, which reads them in their own type.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    auto product_weight = weight.to(type);
    if (padded != vocabulary) product_weight = torch::constant_pad_nd(product_weight, {0, 0, 0, padded - vocabulary});
    auto total = torch::zeros({}, hidden.options().dtype(accumulate));
    // The gradients of the sum of the rows' losses; backward scales them by its incoming gradient / rows.
    torch::Tensor grad_hidden, grad_weight;
    if (with_gradients) {
      grad_hidden = torch::empty(hidden.sizes(), hidden.options().dtype(accumulate));
      grad_weight = torch::zeros(weight.sizes(), weight.options().dtype(accumulate));
    }
    for (std::int64_t begin = 0; begin < rows; begin += chunk_rows) {
      const std::int64_t n = std::min(chunk_rows, rows - begin);
      const auto chunk = hidden.narrow(0, begin, n).to(type);
      const auto chosen = targets.narrow(0, begin, n).unsqueeze(1);
      auto product = torch::matmul(chunk, product_weight.t());
      if (padded != vocabulary) product.narrow(1, vocabulary, padded - vocabulary).fill_(-std::numeric_limits<double>::infinity());
      auto log_probabilities = torch::log_softmax(product, 1, accumulate);
      total -= log_probabilities.gather(1, chosen).sum();
      if (!with_gradients) continue;
      // d(loss of a row)/d(its logits) = softmax - one_hot(target), in the products' type for the
      // two products that carry it back to the hidden states and to the weight (the padded
      // columns' softmax is 0).
      auto probabilities = log_probabilities.exp_();
      probabilities.scatter_add_(1, chosen, torch::full({n, 1}, -1.0, probabilities.options()));
      const auto grad_logits = probabilities.to(type);
      grad_hidden.narrow(0, begin, n).copy_(torch::matmul(grad_logits, product_weight));
      const auto grad_logits_t = grad_logits.narrow(1, 0, vocabulary).t();
      if (type == accumulate) {
        grad_weight.addmm_(grad_logits_t, chunk);
      } else {
        grad_weight.add_(torch::matmul(grad_logits_t, chunk));  // bf16's products summed in fp32
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
