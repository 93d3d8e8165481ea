#pragma once
// A tp group's collectives as tp's layers use them: counted and timed (comm_exposed) for the comm
// summary, and Megatron's conjugate functions built on them, each an autograd function whose
// backward is its forward's mirror: f and g (the all-reduces around a column-row pair) and
// sequence parallelism's three (keep a share of the sequence, gather the shares, reduce-scatter into
// them). strategies/tp.cpp runs the layers; this file moves their tensors.
#include <torch/types.h>

#include <cstdint>

#include "timing/phase_recorder.h"
#include "workloads/vocab_parallel_cross_entropy.h"

namespace ddpbench {

class ProcessGroupContext;

class TensorParallelGroup {
 public:
  void attach(ProcessGroupContext* group) { group_ = group; }
  // Where the collectives are timed as comm_exposed: the step's recorder, or none outside a step.
  void set_phases(PhaseRecorder* phases) { phases_ = phases; }
  int rank() const;
  int size() const;

  // `x` summed over the group, a new tensor. Under --dtype bf16 with 1.x's Gloo, which cannot send
  // bf16, summed in float32 (and counted as sent in it) and rounded back, as ddp's buckets widen.
  torch::Tensor all_reduced(const torch::Tensor& x, const char* what);
  // `values` (contiguous, a type the backend sends) summed or maximised over the group in place.
  void reduce_in_place(torch::Tensor& values, VocabReduce op, const char* what);
  // Every rank's share of the sequence (`share`'s dimension `dim`) put together, in rank order.
  torch::Tensor all_gathered(const torch::Tensor& share, std::int64_t dim, const char* what);
  // `whole` summed over the group, this rank's share of the sequence (dimension `dim`) kept.
  torch::Tensor reduce_scattered(const torch::Tensor& whole, std::int64_t dim, const char* what);

  // One kind of collective's payload (the whole buffer, as the sharded strategies count it) and time.
  struct Kind {
    std::int64_t bytes = 0, collectives = 0;
    double seconds = 0;
    void add(const torch::Tensor& whole, double s);
  };
  struct Traffic {
    std::int64_t bytes = 0, collectives = 0;  // the all-reduces'
    double seconds = 0;
    Kind gathered, scattered;
  };
  Traffic traffic() const { return {bytes_, collectives_, seconds_, gathered_, scattered_}; }
  void reset() {
    bytes_ = 0, collectives_ = 0, seconds_ = 0;
    gathered_ = {}, scattered_ = {};
  }

 private:
  c10::ScalarType sendable(c10::ScalarType type) const;

  ProcessGroupContext* group_ = nullptr;
  PhaseRecorder* phases_ = nullptr;
  std::int64_t bytes_ = 0, collectives_ = 0;
  double seconds_ = 0;
  Kind gathered_, scattered_;
};

// Megatron's f: a column layer's input, whole on every rank, passed through; its gradient, each
// rank's part of the sum, all-reduced.
torch::Tensor copy_to_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& tp);
// Megatron's g: a row layer's partial sums all-reduced into the whole output; its gradient, the
// same on every rank, passed through.
torch::Tensor reduce_from_tensor_parallel(const torch::Tensor& x, TensorParallelGroup& tp);

// Sequence parallelism's three (Megatron's scatter_to_, gather_from_ and
// reduce_scatter_to_sequence_parallel_region), along the sequence's dimension `dim`:
// the hidden state entering the blocks cut to this rank's share (its gradient all-gathered);
torch::Tensor keep_sequence_share(const torch::Tensor& x, std::int64_t dim, TensorParallelGroup& tp);
// a column layer's input (or the output layer's) all-gathered (its gradient, each rank's part of
// the sum, reduce-scattered back into the shares);
torch::Tensor gather_sequence_shares(const torch::Tensor& x, std::int64_t dim, TensorParallelGroup& tp);
// a row layer's partial sums summed, each rank keeping its share (its gradient all-gathered).
torch::Tensor reduce_scatter_to_sequence_share(const torch::Tensor& x, std::int64_t dim, TensorParallelGroup& tp);

}  // namespace ddpbench
