#pragma once
// What a workload states for tensor parallelism (docs/tensor_parallel.md), as it states its wrap
// units: which of its linear layers a tp group splits by output columns and which by input rows
// (Megatron's layout), and the seam through which a strategy runs those layers split. A column
// layer takes its input whole and gives its share of the outputs, with no communication forward; a
// row layer takes its share of the inputs (the column layer's output before it) and gives a partial
// sum of every output, which an all-reduce completes. So a column layer followed by a row one costs
// one all-reduce forward and one backward. No strategy code here.
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>

namespace torch::nn {
class LinearImpl;
}

namespace ddpbench {

enum class TensorParallelSplit { Column, Row };
const char* to_string(TensorParallelSplit split);  // "column", "row"

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
  // The features the split divides (out for column, in for row), and why `ranks` cannot split
  // them evenly (each packed part into whole granules), or empty.
  std::int64_t split_features() const { return split == TensorParallelSplit::Column ? out_features : in_features; }
  std::string why_not_split(int ranks) const;
};

// What a strategy does in place of a planned linear layer's forward (LibTorch's C++ modules have no
// forward hooks): tp runs the layer on its shard of the weight, with the group's communication
// around it. Layers outside the plan run as they are: x Wᵀ + b.
class LinearCallHooks {
 public:
  virtual ~LinearCallHooks() = default;
  virtual torch::Tensor linear(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x) = 0;
};

}  // namespace ddpbench
