#include "strategies/zero_data_parallel.h"

#include "collectives/sharded_buckets.h"
#include "distributed/process_group.h"
#include "strategies/microbatches.h"
#include "strategies/rank_state.h"

namespace ddpbench {
namespace {

class ZeroStrategy final : public Strategy {
 public:
  explicit ZeroStrategy(int stage) : stage_(stage), name_("zero" + std::to_string(stage)) {}

 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec&, const DeviceSet& devices,
                                                   const StrategyOptions& options) const override {
    if (devices.is_cuda() && !compat::have_nccl()) return "this LibTorch has no NCCL, which " + name_ + " needs on CUDA";
    return std::nullopt;
  }

  DataShard do_data_shard() const override { return {group_ ? group_->rank() : 0, group_ ? group_->size() : 1}; }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

  void do_setup(const StrategySetup& setup) override {
    auto placed = place_model_on_rank(setup, name_);
    group_ = placed.group;
    device_ = placed.device;
    model_ = placed.model;
    buffers_ = std::move(placed.buffers);
    workload_ = &setup.workload;
    global_batch_ = setup.spec.global_batch;

    ShardedBucketOptions buckets;
    buckets.caps = {setup.options.ddp.bucket_mb, std::min(1.0, setup.options.ddp.bucket_mb)};
    buckets.overlap = setup.options.ddp.overlap;
    buckets.keep_full_gradients = stage_ == 1;
    shards_ = std::make_unique<ShardedBuckets>(model_->trainable_parameters(), *group_, buckets);
    // The optimizer sees this rank's chunks only: its state is 1/N of the model's. ddpbench's
    // optimizers (SGD with momentum, AdamW) work element by element, so stepping chunks computes
    // what stepping whole parameters would.
    optimizer_ = setup.make_optimizer(shards_->optimizer_parameters());
    precision_ = setup.precision;
    scaler_ = LossScaler(precision_);
    grad_accum_ = setup.options.levers.grad_accum;
    sync_every_microbatch_ = grad_accum_ > 1 && setup.options.levers.sync_every_microbatch;
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    {  // stage 2: the last step's chunks, kept until now: zero_grad, optimizer work (strategy.h)
      auto zero_grad = phases.scope(Phase::Optimizer);
      shards_->free_gradients();
    }
    // --grad-accum: the micro-batches' gradients sum in the full .grad, the buckets' hooks idle until
    // the last one, whose backward reduce-scatters the sums (DDP's no_sync on the others). Under
    // --sync-every-microbatch every micro-batch is a round: its gradients reduce-scattered and added
    // into the chunks the rounds before left (K times the traffic).
    const auto micro = split_microbatches(batch, grad_accum_);
    const double share = static_cast<double>(batch.inputs.size(0)) / static_cast<double>(global_batch_);
    torch::Tensor rank_loss, global_loss;
    for (std::size_t k = 0; k < micro.size(); ++k) {
      const bool last = k + 1 == micro.size();
      // As ddp: rank 0's buffers are the truth, broadcast before every forward.
      auto forward = rank_forward(micro[k].batch, *workload_, *model_, device_, *group_, buffers_, precision_,
                                  global_batch_, phases);
      const auto loss = micro.size() > 1 ? forward.loss * micro[k].weight : forward.loss;
      rank_loss = rank_loss.defined() ? rank_loss + loss.detach() : loss.detach();
      if (last || sync_every_microbatch_) {
        shards_->prepare_step(share, (sync_every_microbatch_ ? loss.detach() : rank_loss) * share, &phases,
                              /*add_to_gradients=*/sync_every_microbatch_ && k > 0);
      }
      {
        auto scope = phases.scope(Phase::Backward);
        scaler_.scale(loss).backward();
      }
      if (last || !sync_every_microbatch_) continue;
      auto scope = phases.scope(Phase::ReduceScatterExposed);
      const auto round_loss = shards_->wait_reduce_scatter();
      global_loss = global_loss.defined() ? global_loss + round_loss : round_loss;
    }
    {
      auto scope = phases.scope(Phase::ReduceScatterExposed);
      const auto round_loss = shards_->wait_reduce_scatter();
      global_loss = global_loss.defined() ? global_loss + round_loss : round_loss;
    }
    {
      auto scope = phases.scope(Phase::Optimizer);
      if (scaler_.enabled()) agree_on_overflow(shards_->optimizer_parameters(), device_, *group_);
      scaler_.step(*optimizer_);
    }
    {
      auto scope = phases.scope(Phase::AllGatherExposed);
      shards_->all_gather_parameters();
    }
    ++measured_steps_;
    return global_loss;
  }

  std::vector<torch::Tensor> do_trained_parameters() override { return model_->distinct_parameters(); }

  std::optional<CommSummary> do_comm_summary() const override {
    const auto& t = shards_->traffic();
    if (t.steps == 0) return std::nullopt;
    // Per optimizer step; the buckets' timeline per round (under --sync-every-microbatch each
    // micro-batch is one, t.steps counts them).
    const std::int64_t optimizer_steps = std::max<std::int64_t>(1, measured_steps_);
    const auto steps = static_cast<double>(optimizer_steps), rounds = static_cast<double>(t.steps);
    CommSummary c;
    c.backend = group_->backend_name();
    c.collective_seconds_measured = group_->host_waits_for_collectives();
    c.world_size = group_->size();
    c.buckets = shards_->bucket_count();
    c.bytes_per_step = t.allreduce_bytes / optimizer_steps;
    c.reduce_scatter_bytes_per_step = t.reduce_scatter_bytes / optimizer_steps;
    c.all_gather_bytes_per_step = t.all_gather_bytes / optimizer_steps;
    c.reduce_scatter_seconds_per_step = t.reduce_scatter_seconds / steps;
    c.all_gather_seconds_per_step = t.all_gather_seconds / steps;
    // The buckets' timeline, as ddp's: a projection replays these reduce-scatters behind backward
    // rather than assume DDP's default caps.
    for (std::size_t b = 0; b < t.ready_seconds.size(); ++b) {
      c.bucket_timeline.push_back({shards_->bucket_bytes(b), t.ready_seconds[b] / rounds,
                                   t.bucket_reduce_scatter_seconds[b] / rounds});
    }
    return c;
  }
  void do_reset_measured_stats() override {
    shards_->reset_traffic();
    measured_steps_ = 0;
  }

 private:
  int stage_;
  std::string name_;
  ProcessGroupContext* group_ = nullptr;
  const Workload* workload_ = nullptr;
  std::int64_t global_batch_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::vector<torch::Tensor> buffers_;
  std::unique_ptr<ShardedBuckets> shards_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
  int grad_accum_ = 1;
  bool sync_every_microbatch_ = false;
  std::int64_t measured_steps_ = 0;  // optimizer steps since the last reset (rounds may be more)
};

}  // namespace

std::unique_ptr<Strategy> make_zero_strategy(int stage) { return std::make_unique<ZeroStrategy>(stage); }

}  // namespace ddpbench
