// `tp`: Megatron's tensor parallelism. One process per rank as ddp; every rank trains on the whole
// batch and holds, of each linear layer the workload's plan names (workloads/tensor_parallel_plan.h),
// its share: a column layer its rows of the weight and bias (its share of the outputs), a row layer
// its columns of the weight (its share of the inputs) and the whole bias. What is outside the plan
// is held whole on every rank. A column layer's input passes through f (identity forward, its
// gradient all-reduced backward), a row layer's partial output through g (all-reduced forward,
// identity backward), so a column-row pair costs one all-reduce each way (Megatron-LM, arXiv
// 1909.08053, section 3). A table split by vocabulary looks up the ids in its rows, zeros for the
// others, and g sums them; the output layer split by vocabulary takes its input through f and gives
// the rank's share of the logits to the vocabulary-parallel loss, whose two all-reduces are of a
// number or two a row. Every rank then computes the same loss and the same gradients for what it
// holds whole, so nothing else is reduced. The all-reduces block compute: they are timed as
// comm_exposed, inside forward and backward.
//
// Under --sequence-parallel (Korthikanti et al., arXiv 2205.05198) the hidden state between the
// blocks is each rank's share of the sequence: where the model enters its blocks it keeps its share
// (its gradient all-gathered backward), a column layer all-gathers its input (its gradient
// reduce-scattered) and a row layer reduce-scatters its partial sums (its gradient all-gathered),
// the same bytes as the all-reduce they replace; the output layer all-gathers its input. The
// LayerNorms and the row layers' biases then see a share of the tokens each, so their gradients are
// summed over the group after backward, as Megatron does.
//
// On a mesh (--mesh dp=D,tp=T; distributed/mesh.h) the split above runs over each group of T ranks
// and each of the D groups trains on its share of the batch, as ddp's ranks do: the gradients of
// what a rank holds are all-reduced over its dp group in ddp's buckets (collectives/
// gradient_bucketer.h), overlapped with backward, weighted by the group's share of the batch, and
// the sequence-parallel sums over the tp group come after them (both are sums, so either order).
// On --mesh fsdp=F,tp=T the F groups shard what each rank holds instead, as fsdp shards a model
// (strategies/sharded_model.h): each wrap unit's shares gathered over the fsdp group around its
// forward and before its backward, its gradients reduce-scattered into chunks that the optimizer
// steps. Sequence parallelism does not run on an fsdp mesh yet (the CLI refuses it).
#include <torch/nn/functional/linear.h>
#include <torch/nn/modules/embedding.h>

#include <stdexcept>
#include <unordered_map>

#include "compat/torch_compat.h"
#include "collectives/gradient_bucketer.h"
#include "distributed/mesh.h"
#include "distributed/process_group.h"
#include "strategies/microbatches.h"
#include "strategies/rank_state.h"
#include "strategies/sharded_model.h"
#include "strategies/strategy.h"
#include "strategies/tp_group.h"
#include "workloads/vocab_parallel_cross_entropy.h"

namespace ddpbench {
namespace {

// Where this rank's share of a split parameter sits in the whole: along `dim`, which holds `packed`
// equal parts side by side (attention's Q, K and V), features [first, first + count) of each part
// (1/t of it, or a vocabulary's uneven share).
struct Share {
  std::int64_t dim = 0, packed = 1;
  std::vector<std::int64_t> whole_shape;
  std::int64_t first = 0, count = 0;

  // Rank `rank` of `ranks`' share of a parameter shaped `whole`.
  static Share of(const torch::Tensor& whole, std::int64_t dim, std::int64_t packed, TensorParallelSplit split,
                  int ranks, int rank) {
    Share share{dim, packed, whole.sizes().vec()};
    const std::int64_t part = whole.size(dim) / packed;
    const auto v = split == TensorParallelSplit::Vocabulary ? vocabulary_share(part, ranks, rank)
                                                            : VocabularyShare{rank * (part / ranks), part / ranks};
    share.first = v.first;
    share.count = v.count;
    return share;
  }
  std::vector<std::int64_t> held_shape() const {
    auto shape = whole_shape;
    shape[static_cast<std::size_t>(dim)] = packed * count;
    return shape;
  }
  // The share within `tensor` (the whole, or with held the share itself) as a view with `dim`
  // unfolded into [packed, part]: what to copy from or into.
  torch::Tensor in(const torch::Tensor& tensor, bool held = false) const {
    auto unfolded = held ? held_shape() : whole_shape;
    unfolded[static_cast<std::size_t>(dim)] /= packed;
    unfolded.insert(unfolded.begin() + dim, packed);
    return tensor.view(unfolded).narrow(dim + 1, held ? 0 : first, count);
  }
};

// The ranks each layer is split over: the mesh's tp dimension, or the whole world.
int tensor_parallel_size(const CaseSpec& spec, const StrategyOptions& options) {
  if (options.mesh.empty()) return spec.world_size;
  const Mesh mesh = Mesh::parse(options.mesh, mesh_dimension_names(), spec.world_size);
  const auto tp = mesh.find("tp");
  return tp ? mesh.dimensions()[*tp].size : 0;  // 0: the mesh has no tp dimension
}

class TensorParallelStrategy final : public Strategy, private LayerCallHooks {
 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec& spec, const DeviceSet& devices,
                                                   const StrategyOptions& options) const override {
    if (devices.is_cuda() && !compat::have_nccl()) return "this LibTorch has no NCCL, which tp needs on CUDA";
    const Workload& workload = WorkloadRegistry::instance().get(spec.workload);
    const int t = tensor_parallel_size(spec, options);
    if (t == 0) return "tp runs on a mesh with a tp dimension, and " + options.mesh + " has none";
    const std::string ranks = options.mesh.empty() ? " ranks (--world-size)" : " ranks (--mesh's tp)";
    if (options.tp.sequence_parallel) {
      const std::int64_t tokens = workload.sequence_parallel_length();
      if (tokens == 0) {
        return "tp --sequence-parallel splits the hidden state by its sequence, and " + spec.workload +
               "'s model has none to split";
      }
      if (tokens % t != 0) {
        return "tp --sequence-parallel: " + spec.workload + "'s " + std::to_string(tokens) +
               " tokens a sample (--seq-len) do not divide among " + std::to_string(t) + ranks;
      }
    }
    const WorkloadFacts facts = workload.facts();
    if (facts.tensor_parallel_layers.empty()) {
      return "tp splits linear layers by columns and rows, and " + facts.tensor_parallel_refusal;
    }
    for (const auto& layer : facts.tensor_parallel_layers) {
      const auto why = layer.why_not_split(t);
      if (!why.empty()) return "tp: " + spec.workload + ": " + why + (options.mesh.empty() ? " (--world-size)" : " (--mesh)");
    }
    return std::nullopt;
  }

  // Every rank of a tp group trains on its dp (or fsdp) group's share of the batch (all of it
  // without a mesh): the model is split, not the data.
  DataShard do_data_shard() const override {
    return data_group_ ? DataShard{data_group_->rank(), data_group_->size()} : DataShard{0, 1};
  }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

  void do_setup(const StrategySetup& setup) override {
    auto placed = place_model_on_rank(setup, "tp");
    group_ = placed.group;
    if (!setup.options.mesh.empty()) join_mesh(Mesh::parse(setup.options.mesh, mesh_dimension_names(), group_->size()));
    device_ = placed.device;
    model_ = placed.model;
    tp_.attach(group_);
    workload_ = &setup.workload;
    global_batch_ = setup.spec.global_batch;
    grad_accum_ = setup.options.levers.grad_accum;
    shard_planned_layers();
    sequence_parallel_ = setup.options.tp.sequence_parallel;
    if (sequence_parallel_) collect_sequence_parallel_parameters();
    model_->set_layer_hooks(this);
    if (dp_group_) {
      // ddp's buckets over the dp group, of the shares this rank holds (the same shapes on every
      // member: they hold the same shares).
      bucketer_ = std::make_unique<GradientBucketer>(model_->trainable_parameters(), *dp_group_, BucketOptions{});
    }
    if (fsdp_group_) {
      // fsdp's units over the fsdp group, of the shares this rank holds; the optimizer steps this
      // rank's chunks of them. Parameters gathered in their own dtype (no bf16 gathering here yet).
      ShardedUnitOptions options;
      options.reshard_after_forward = setup.options.fsdp.reshard_after_forward;
      options.prefetch = setup.options.fsdp.prefetch;
      options.overlap = setup.options.ddp.overlap;
      // --grad-accum --no-sync-accum: the units' unsharded gradients kept to one reduce-scatter after
      // the last micro-batch, as fsdp's.
      options.gradients_at_finish = grad_accum_ > 1 && setup.options.levers.no_sync_accum;
      sharded_ = std::make_unique<ShardedModel>(*model_, *fsdp_group_, options, "tp");
    }
    optimizer_ = setup.make_optimizer(sharded_ ? sharded_->units().optimizer_parameters() : model_->trainable_parameters());
    precision_ = setup.precision;
    scaler_ = LossScaler(precision_);
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    {  // the last step's gradients, kept until now: zero_grad, optimizer work (strategy.h)
      auto scope = phases.scope(Phase::Optimizer);
      if (bucketer_) {
        bucketer_->zero_grad();
      } else if (sharded_) {
        sharded_->units().free_gradients();
      } else {
        for (auto& p : model_->trainable_parameters()) p.mutable_grad() = torch::Tensor();
      }
    }
    tp_.set_phases(&phases);
    // --grad-accum: the micro-batches' gradients sum in .grad (the tp group's collectives run in each
    // one's forward and backward); a dp mesh's buckets all-reduce after the last only (no_sync), and
    // sequence parallelism's LayerNorm gradients are summed over the group once, after the last. On
    // an fsdp mesh each micro-batch is a round of the units' gathers and reduce-scatters, added into
    // the chunks (FSDP2's default, as fsdp's), or under --no-sync-accum one round holds them all.
    const auto micro = split_microbatches(batch, grad_accum_);
    const double share = static_cast<double>(batch.inputs.size(0)) / static_cast<double>(global_batch_);
    const bool one_round = micro.size() == 1 || !sharded_ || sharded_->units().gradients_at_finish();
    torch::Tensor loss, round_loss;
    for (std::size_t k = 0; k < micro.size(); ++k) {
      // This rank's gradients enter the reduce-scatters times its fsdp group's share of the batch.
      if (sharded_ && (!one_round || k == 0)) sharded_->units().begin_step(share, &phases, /*add_to_gradients=*/k > 0);
      const auto forward = rank_forward(micro[k].batch, *workload_, *model_, device_, *group_, {}, precision_,
                                        global_batch_, phases);
      const auto weighted = micro.size() > 1 ? forward.loss * micro[k].weight : forward.loss;
      round_loss = round_loss.defined() && one_round ? round_loss + weighted.detach() : weighted.detach();
      const bool round_ends = !one_round || k + 1 == micro.size();
      if (round_ends) {
        if (bucketer_) bucketer_->prepare_step(share, round_loss * share, &phases);
        if (sharded_) sharded_->units().set_loss(round_loss * share);
      }
      {
        auto scope = phases.scope(Phase::Backward);
        scaler_.scale(weighted).backward();
      }
      if (!round_ends) continue;
      if (sequence_parallel_ && !bucketer_) {
        auto scope = phases.scope(Phase::Backward);
        sum_sequence_parallel_gradients();
      }
      if (sharded_) {
        const auto reduced = sharded_->units().finish_backward();  // its wait is the exposed reduce-scatter
        loss = loss.defined() ? loss + reduced : reduced;
      } else if (!bucketer_) {
        loss = round_loss;
      }
    }
    if (bucketer_) {
      {
        auto scope = phases.scope(Phase::CommExposed);
        bucketer_->wait_all();
      }
      auto scope = phases.scope(Phase::Reduce);
      loss = bucketer_->unpack();  // the global batch's loss: the dp groups' shares, weighted
      if (sequence_parallel_) sum_sequence_parallel_gradients();
    }
    tp_.set_phases(nullptr);
    {
      auto scope = phases.scope(Phase::Optimizer);
      scaler_.step(*optimizer_);  // every rank holds the same loss: all skip or step alike
    }
    ++steps_;
    return loss;
  }

  // The planned layers whole, each gathered from its ranks' shares (the others' parts zeros, summed);
  // the rest as held. Only the parity check asks.
  std::vector<torch::Tensor> do_trained_parameters() override {
    torch::NoGradGuard no_grad;
    const auto parameters = model_->distinct_parameters();
    // What this rank holds of each, gathered over the fsdp group first on an fsdp mesh.
    const auto held = sharded_ ? sharded_->full_parameters() : parameters;
    std::vector<torch::Tensor> out;
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      const auto found = shards_.find(parameters[i].unsafeGetTensorImpl());
      if (found == shards_.end()) {
        out.push_back(held[i]);
        continue;
      }
      const Share& share = found->second;
      auto whole = torch::zeros(share.whole_shape, held[i].options());
      share.in(whole).copy_(share.in(held[i], /*held=*/true));
      group_->allreduce(whole, "tp: gathering the trained parameters");
      out.push_back(whole);
    }
    return out;
  }
  std::vector<torch::Tensor> do_held_parameters() override { return model_->distinct_parameters(); }

  std::optional<CommSummary> do_comm_summary() const override {
    if (steps_ == 0) return std::nullopt;
    const auto traffic = tp_.traffic();
    CommSummary c;
    c.backend = group_->backend_name();
    c.collective_seconds_measured = group_->host_waits_for_collectives();
    c.world_size = group_->size();
    c.bytes_per_step = traffic.bytes / steps_;
    c.buckets = static_cast<int>(
        (traffic.collectives + traffic.scattered.collectives + traffic.gathered.collectives) / steps_);
    c.reduce_scatters_per_step = static_cast<int>(traffic.scattered.collectives / steps_);
    c.all_gathers_per_step = static_cast<int>(traffic.gathered.collectives / steps_);
    c.allreduce_seconds_per_step = traffic.seconds / static_cast<double>(steps_);
    c.reduce_scatter_bytes_per_step = traffic.scattered.bytes / steps_;
    c.all_gather_bytes_per_step = traffic.gathered.bytes / steps_;
    c.reduce_scatter_seconds_per_step = traffic.scattered.seconds / static_cast<double>(steps_);
    c.all_gather_seconds_per_step = traffic.gathered.seconds / static_cast<double>(steps_);
    if (mesh_) {
      // Each dimension's traffic apart: tp's collectives (the figures above), dp's buckets.
      for (const auto& dim : mesh_->dimensions()) {
        CommSummary::MeshTraffic d{dim.name, dim.size};
        if (dim.name == "tp") {
          d.bytes_per_step = c.bytes_per_step + c.reduce_scatter_bytes_per_step + c.all_gather_bytes_per_step;
          d.collectives_per_step = c.buckets;
        } else if (dim.name == "dp" && bucketer_ && bucketer_->stats().steps > 0) {
          const auto& s = bucketer_->stats();
          d.bytes_per_step = s.bytes / s.steps;
          d.collectives_per_step = static_cast<int>(s.collectives / s.steps);
        } else if (dim.name == "fsdp" && sharded_ && sharded_->units().traffic().steps > 0) {
          // Per optimizer step: under --grad-accum each micro-batch is a round of the units' own.
          const auto& u = sharded_->units().traffic();
          d.bytes_per_step = (u.all_gather_bytes + u.reduce_scatter_bytes + u.allreduce_bytes) / steps_;
          d.collectives_per_step = static_cast<int>(u.collectives / steps_);
        }
        c.mesh.push_back(d);
      }
    }
    return c;
  }
  void do_reset_measured_stats() override {
    tp_.reset();
    if (bucketer_) bucketer_->reset_stats();
    if (sharded_) sharded_->units().reset_traffic();
    steps_ = 0;
  }

 private:
  // This rank's groups on the mesh: its tp group becomes the group the layers split over, its dp
  // group (if the mesh has one) the one its gradients are reduced over, its fsdp group (if the mesh
  // has one) the one what it holds is sharded over.
  void join_mesh(const Mesh& mesh) {
    mesh_groups_ = mesh_groups(*group_, mesh);
    group_ = mesh_groups_[*mesh.find("tp")].get();
    if (const auto dp = mesh.find("dp")) data_group_ = dp_group_ = mesh_groups_[*dp].get();
    if (const auto fsdp = mesh.find("fsdp")) data_group_ = fsdp_group_ = mesh_groups_[*fsdp].get();
    mesh_ = mesh;
  }

  // Each planned layer's weight (and a column layer's bias) cut to this rank's share, in place, so
  // that the optimizer, the memory probe and the checkpoint see the shares.
  void shard_planned_layers() {
    torch::NoGradGuard no_grad;
    const int t = group_->size(), rank = group_->rank();
    const auto keep_share = [&](torch::Tensor& p, std::int64_t dim, std::int64_t packed, TensorParallelSplit split) {
      const Share share = Share::of(p, dim, packed, split, t, rank);
      p.set_data(share.in(p).clone(at::MemoryFormat::Contiguous).view(share.held_shape()));
      shards_[p.unsafeGetTensorImpl()] = share;
      return share;
    };
    for (auto planned : model_->tensor_parallel_plan()) {
      const auto why = TensorParallelLayerShape{planned.name, planned.split, planned.weight.size(1),
                                                planned.weight.size(0), planned.packed, planned.granule}
                           .why_not_split(t);
      if (!why.empty()) throw CaseFailure("tp: " + why);
      // set_data keeps each tensor's identity: the model's own members now hold the shares.
      const bool has_bias = planned.bias.defined() && planned.bias.numel() > 0;
      switch (planned.split) {
        case TensorParallelSplit::Column:
          keep_share(planned.weight, 0, planned.packed, planned.split);
          if (has_bias) keep_share(planned.bias, 0, planned.packed, planned.split);
          held_[planned.weight.unsafeGetTensorImpl()] = planned.split;
          break;
        case TensorParallelSplit::Row:
          keep_share(planned.weight, 1, planned.packed, planned.split);
          held_[planned.weight.unsafeGetTensorImpl()] = planned.split;
          break;
        case TensorParallelSplit::Vocabulary: {
          const Share share = keep_share(planned.weight, 0, 1, planned.split);
          if (has_bias) keep_share(planned.bias, 0, 1, planned.split);
          vocabulary_first_[planned.weight.unsafeGetTensorImpl()] = share.first;
          break;
        }
      }
    }
  }

  torch::Tensor linear(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& x) override {
    const auto found = held_.find(weight.unsafeGetTensorImpl());
    if (found == held_.end()) {
      // A weight split by vocabulary holds some of its rows: as a plain layer it would give some of
      // the logits as if they were all.
      if (vocabulary_first_.count(weight.unsafeGetTensorImpl()) != 0) {
        throw std::logic_error("tp: a layer split by vocabulary ran through call_linear; its plan needs it run with "
                               "its loss through call_output_loss");
      }
      return torch::nn::functional::linear(x, weight, bias);
    }
    const bool has_bias = bias.defined() && bias.numel() > 0;
    if (found->second == TensorParallelSplit::Column) {
      const auto input = sequence_dim_ ? gather_sequence_shares(x, *sequence_dim_, tp_)
                         : x.requires_grad() ? copy_to_tensor_parallel(x, tp_)
                                             : x;
      return torch::nn::functional::linear(input, weight, has_bias ? bias : torch::Tensor());
    }
    auto partial = torch::nn::functional::linear(x, weight);
    auto whole = sequence_dim_ ? reduce_scatter_to_sequence_share(partial, *sequence_dim_, tp_)
                               : reduce_from_tensor_parallel(partial, tp_);
    return has_bias ? whole + bias : whole;
  }

  // Under sequence parallelism the rank's share of the sequence from here on; the dimension is
  // kept for the layers after (set each forward, the same each time).
  torch::Tensor enter_sequence_region(const torch::Tensor& hidden, std::int64_t sequence_dim) override {
    if (!sequence_parallel_) return hidden;
    sequence_dim_ = sequence_dim;
    return keep_sequence_share(hidden, sequence_dim, tp_);
  }

  // A table split by vocabulary: the ids in this rank's rows looked up, zeros for the others, summed
  // over the group (Megatron's VocabParallelEmbedding).
  torch::Tensor embedding(torch::nn::EmbeddingImpl& table, const torch::Tensor& ids) override {
    const auto found = vocabulary_first_.find(table.weight.unsafeGetTensorImpl());
    if (found == vocabulary_first_.end()) return table.forward(ids);
    const std::int64_t first = found->second, count = table.weight.size(0);
    const auto outside = ids.lt(first).logical_or(ids.ge(first + count));
    const auto rows = torch::embedding(table.weight, (ids - first).masked_fill(outside, 0));
    return reduce_from_tensor_parallel(rows.masked_fill(outside.unsqueeze(-1), 0), tp_);
  }

  // An output layer split by vocabulary: its input through f, this rank's share of the logits, the
  // loss on the shares (workloads/vocab_parallel_cross_entropy.h), so no rank holds whole logits.
  torch::Tensor output_loss(const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& hidden,
                            const torch::Tensor& targets,
                            const std::function<torch::Tensor()>& as_the_workload_computes) override {
    const auto found = vocabulary_first_.find(weight.unsafeGetTensorImpl());
    if (found == vocabulary_first_.end()) return as_the_workload_computes();
    const auto whole = sequence_dim_ ? gather_sequence_shares(hidden, *sequence_dim_, tp_) : hidden;
    const auto flat = whole.reshape({-1, whole.size(-1)});
    const auto input = sequence_dim_ || !flat.requires_grad() ? flat : copy_to_tensor_parallel(flat, tp_);
    const bool has_bias = bias.defined() && bias.numel() > 0;
    const auto logits = torch::nn::functional::linear(input, weight, has_bias ? bias : torch::Tensor());
    const VocabAllReduce all_reduce = [this](torch::Tensor& values, VocabReduce op) {
      tp_.reduce_in_place(values, op, "all-reduce loss");
    };
    return vocab_parallel_cross_entropy(logits, targets.reshape({-1}), found->second, all_reduce);
  }

  // The whole parameters that ran on the sequence's share (the model's LayerNorms in the region and
  // the row layers' biases, added after the reduce-scatter): their gradients are each rank's part.
  void collect_sequence_parallel_parameters() {
    for (const auto& p : model_->sequence_parallel_parameters()) {
      if (p.requires_grad()) sequence_parallel_parameters_.push_back(p);
    }
    for (const auto& planned : model_->tensor_parallel_plan()) {
      if (planned.split == TensorParallelSplit::Row && planned.bias.defined() && planned.bias.requires_grad()) {
        sequence_parallel_parameters_.push_back(planned.bias);
      }
    }
  }
  // One all-reduce of those gradients, flattened (Megatron's allreduce of the sequence-parallel
  // gradients): each rank then holds their sum over the whole sequence, as single's.
  void sum_sequence_parallel_gradients() {
    std::vector<torch::Tensor> grads, flat;
    for (const auto& p : sequence_parallel_parameters_) {
      if (!p.grad().defined()) continue;
      grads.push_back(p.grad());
      flat.push_back(p.grad().reshape(-1));
    }
    if (grads.empty()) return;
    const auto summed = tp_.all_reduced(torch::cat(flat), "all-reduce gradients");
    std::int64_t offset = 0;
    for (auto& g : grads) {
      g.view(-1).copy_(summed.narrow(0, offset, g.numel()));
      offset += g.numel();
    }
  }

  ProcessGroupContext* group_ = nullptr;  // the tp group: the world's, or the mesh's tp dimension's
  std::optional<Mesh> mesh_;
  std::vector<std::unique_ptr<ProcessGroupContext>> mesh_groups_;  // this rank's, one per dimension
  ProcessGroupContext* dp_group_ = nullptr;                         // the mesh's dp dimension's, if any
  ProcessGroupContext* fsdp_group_ = nullptr;                       // the mesh's fsdp dimension's, if any
  ProcessGroupContext* data_group_ = nullptr;                       // whichever of the two splits the batch
  TensorParallelGroup tp_;
  bool sequence_parallel_ = false;
  std::optional<std::int64_t> sequence_dim_;  // set where the model enters its blocks, under sequence parallelism
  std::vector<torch::Tensor> sequence_parallel_parameters_;
  const Workload* workload_ = nullptr;
  std::int64_t global_batch_ = 1;
  int grad_accum_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::unordered_map<const void*, TensorParallelSplit> held_;  // each column or row layer's, by its weight's TensorImpl
  // Each weight split by vocabulary (a table, an output layer), by its TensorImpl: this rank's first row.
  std::unordered_map<const void*, std::int64_t> vocabulary_first_;
  std::unordered_map<const void*, Share> shards_;  // each split parameter's, by its TensorImpl
  std::unique_ptr<GradientBucketer> bucketer_;  // over dp_group_; after model_ and the groups: gone first
  std::unique_ptr<ShardedModel> sharded_;       // over fsdp_group_; likewise
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
  std::int64_t steps_ = 0;
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"tp", "tensor parallelism (Megatron): each planned linear layer split over the ranks by "
                            "columns or rows (one all-reduce forward and one backward a column-row pair), the "
                            "embedding and the output layer by vocabulary",
                            9, /*uses_all_devices=*/true, [] { return std::make_unique<TensorParallelStrategy>(); },
                            /*multi_process=*/true, /*asynchronous=*/false, /*one_cuda_device=*/false,
                            /*needs_chain=*/false, /*needs_tensor_parallel_plan=*/true});

}  // namespace ddpbench
