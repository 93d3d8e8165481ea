#pragma once
// What a workload states for tensor parallelism (docs/tensor_parallel.md), as it states its wrap
// units: which of its linear layers a tp group splits by output columns and which by input rows
// (Megatron's layout), and the seam through which a strategy runs those layers split. A column
// layer takes its input whole and gives its share of the outputs, with no communication forward; a
// row layer takes its share of the inputs (the column layer's output before it) and gives a partial
// sum of every output, which an all-reduce completes. So a column layer followed by a row one costs
// one all-reduce forward and one backward. An embedding and the output layer that gives the logits
// are split by vocabulary: each rank holds some of the table's rows (and of the output layer's), its
// lookups all-reduced forward, the loss computed on the split logits, so no rank holds whole ones
// (Megatron's VocabParallelEmbedding and vocabulary-parallel cross-entropy). No strategy code here.
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace torch::nn {
class EmbeddingImpl;
class LinearImpl;
}

namespace ddpbench {

// Column and Row: a linear layer's outputs or inputs. Vocabulary: the rows of a weight whose first
// dimension is the vocabulary, an embedding's table or the output layer's weight (tied to the table
// or its own, with its bias), in shares that may differ by a row (a vocabulary seldom divides:
// GPT-2's 50257 is prime to every group size), a rank's share of the logits going to the loss whole.
enum class TensorParallelSplit { Column, Row, Vocabulary };
const char* to_string(TensorParallelSplit split);  // "column", "row", "vocabulary"

// One planned layer: its name in the model (fc2, h3.c_attn), its weight [out, in] and bias ([out],
// or undefined), how it is split, and how its split features are laid out: `packed` equal parts side
// by side, each split over the ranks alike (attention's fused Q, K and V: 3), in whole groups of
// `granule` features (a head's width: a rank holds whole heads). A layer is named by its tensors,
// not by a torch::nn::Linear, so a fused projection held as bare parameters (MultiheadAttention's
// in_proj_weight) can be planned too.
struct TensorParallelLayer {
  std::string name;
  torch::Tensor weight;
  torch::Tensor bias;
  TensorParallelSplit split = TensorParallelSplit::Column;
  std::int64_t packed = 1;
  std::int64_t granule = 1;
};
// A torch::nn::Linear's entry in a plan.
TensorParallelLayer planned_linear(std::string name, torch::nn::LinearImpl& layer, TensorParallelSplit split,
                                   std::int64_t packed = 1, std::int64_t granule = 1);

// A planned layer's shape, for checks that need no model (WorkloadFacts): whether t ranks split it.
struct TensorParallelLayerShape {
  std::string name;
  TensorParallelSplit split = TensorParallelSplit::Column;
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  std::int64_t packed = 1;
  std::int64_t granule = 1;
  // The features the split divides (out for column and vocabulary, in for row), and why `ranks`
  // cannot split them (evenly, each packed part into whole granules; a vocabulary, at least a row
  // a rank), or empty.
  std::int64_t split_features() const { return split == TensorParallelSplit::Row ? in_features : out_features; }
  std::string why_not_split(int ranks) const;
};

// Where rank `rank` of `ranks` starts in `features` split by vocabulary, and how many it holds: the
// first features % ranks ranks one more than the others.
struct VocabularyShare {
  std::int64_t first = 0, count = 0;
};
VocabularyShare vocabulary_share(std::int64_t features, int ranks, int rank);

// What a strategy does in place of a planned layer's forward (LibTorch's C++ modules have no forward
// hooks): tp runs the layer on its share of the weight, with the group's communication around it.
// Layers outside the plan run as they are.
class LayerCallHooks {
 public:
  virtual ~LayerCallHooks() = default;
  // x Wᵀ + b.
  virtual torch::Tensor linear(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x) = 0;
  // table(ids).
  virtual torch::Tensor embedding(torch::nn::EmbeddingImpl& table, const torch::Tensor& ids) = 0;
  // The mean loss of the logits hidden Wᵀ + b against targets (hidden [..., width] as the blocks
  // give it, targets [...] in the same order); `as_the_workload_computes` computes it on the whole
  // weight as the workload does (gpt2's fused chunks), for a weight the strategy does not split.
  virtual torch::Tensor output_loss(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& hidden,
                                    const torch::Tensor& targets,
                                    const std::function<torch::Tensor()>& as_the_workload_computes) = 0;
  // The hidden state entering the blocks, its sequence along `sequence_dim`: under sequence
  // parallelism the rank's share of the sequence from here to the output layer; else itself.
  virtual torch::Tensor enter_sequence_region(const torch::Tensor& hidden, std::int64_t sequence_dim) = 0;
};

}  // namespace ddpbench
