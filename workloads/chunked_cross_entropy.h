#pragma once
// Mean cross-entropy of softmax(hidden · weightᵀ) against integer targets, computed over chunks of
// rows so that the full [rows, vocabulary] logits never exist at once. Forward takes each chunk's
// logits, its share of the loss and, where a gradient is wanted, its gradients for `hidden` and
// `weight` straight away; backward only scales those by the loss's incoming gradient. For a language
// model's output layer this is the difference between a [tokens, vocab] fp32 tensor (3.3 GB for
// GPT-2 at 16 x 1024 tokens, twice over with its gradient) and one chunk of it, for the weight's
// gradient (in fp32) held from forward to backward.
#include <torch/types.h>

#include <cstdint>

namespace ddpbench {

// hidden: [rows, width] (any float type; under autocast the chunk products run in autocast's
// type, as a plain matmul would); weight: [vocabulary, width]; targets: [rows], int64.
// chunk_rows: rows a chunk (>= 1). The loss is float32 (float64 for float64 inputs), like
// cross-entropy under autocast.
torch::Tensor chunked_linear_cross_entropy(const torch::Tensor& hidden, const torch::Tensor& weight,
                                           const torch::Tensor& targets, std::int64_t chunk_rows);

// Rows a chunk for a vocabulary: as many as keep one chunk's fp32 logits within `budget_bytes`.
std::int64_t chunk_rows_for(std::int64_t vocabulary, std::int64_t budget_bytes);

}  // namespace ddpbench
