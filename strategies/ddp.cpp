// `ddp`: one process per rank, a full replica each, every rank training on its own shard of the
// global batch; gradients all-reduced in size-capped buckets while backward still runs (see
// GradientBucketer), Gloo on CPU and NCCL on CUDA. As PyTorch's DistributedDataParallel: rank 0's
// parameters and buffers are broadcast at the start, buffers again before every forward unless
// --sync-bn makes BatchNorm statistics global, and only rank 0 saves checkpoints.
#include <torch/csrc/autograd/custom_function.h>
#include <torch/serialize/output-archive.h>

#include <algorithm>
#include <sstream>

#include "base/atomic_file.h"
#include "distributed/process_group.h"
#include "strategies/microbatches.h"
#include "strategies/rank_state.h"
#include "strategies/strategy.h"
#include "compat/torch_compat.h"
#include "collectives/gradient_bucketer.h"
#include "workloads/batch_norm.h"

namespace ddpbench {
namespace {

// A differentiable all-reduce (sum): SyncBatchNorm's statistics forward, their gradients backward.
// (CMakeLists.txt compiles this file without -Warray-bounds and -Wstringop-overflow: GCC 14 reports
// a false out-of-bounds memmove in std::vector<bool>::reserve inside LibTorch 2.x's
// Function<T>::apply.)
struct AllReduceSum : torch::autograd::Function<AllReduceSum> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               ProcessGroupContext* group) {
    ctx->saved_data["group"] = reinterpret_cast<std::int64_t>(group);
    auto sum = x.detach().clone();
    group->allreduce(sum, "SyncBatchNorm statistics");
    return sum;
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto* group = reinterpret_cast<ProcessGroupContext*>(ctx->saved_data["group"].toInt());
    auto sum = grads[0].contiguous().clone();
    group->allreduce(sum, "SyncBatchNorm gradients");
    return {sum, torch::Tensor()};
  }
};

// Rank 0 writes the plain model (SyncBatchNorm layers keep BatchNorm's names), atomically and only
// over a regular file (the path was claimed before the run: cli/output_paths.h).
void save_checkpoint(torch::nn::Module& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  model.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  try {
    write_file_atomically(path, bytes.str());
  } catch (const std::exception& e) {
    throw CaseFailure(std::string("--checkpoint: ") + e.what());
  }
}

class DdpStrategy final : public Strategy {
 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec&, const DeviceSet& devices,
                                                   const StrategyOptions&) const override {
    if (devices.is_cuda() && !compat::have_nccl()) return "this LibTorch has no NCCL, which ddp needs on CUDA";
    return std::nullopt;
  }

  DataShard do_data_shard() const override { return {group_ ? group_->rank() : 0, group_ ? group_->size() : 1}; }

  void do_setup(const StrategySetup& setup) override {
    if (setup.process_group == nullptr) throw std::logic_error("ddp runs only inside a rank process");
    group_ = setup.process_group;
    workload_ = &setup.workload;
    options_ = setup.options.ddp;
    global_batch_ = setup.spec.global_batch;
    device_ = setup.devices.device(group_->local_rank());
    model_ = setup.model;
    model_->to(device_);
    model_->train();
    if (options_.sync_bn) {
      ProcessGroupContext* group = group_;
      convert_to_sync_batch_norm(*model_, [group](const torch::Tensor& x) { return AllReduceSum::apply(x, group); });
    }
    std::vector<torch::Tensor> state = model_->distinct_parameters();
    buffers_ = model_->distinct_buffers();
    state.insert(state.end(), buffers_.begin(), buffers_.end());
    start_from_rank0_state(state, *group_, "ddp");
    // With SyncBatchNorm every rank computes the same statistics; otherwise, as DDP, rank 0's
    // buffers are the truth and are broadcast before every forward.
    broadcast_buffers_ = !options_.sync_bn && !buffers_.empty();

    BucketOptions buckets;
    buckets.cap_mb = options_.bucket_mb;
    buckets.first_cap_mb = std::min(1.0, options_.bucket_mb);
    buckets.overlap = options_.overlap;
    buckets.grad_as_bucket_view = options_.grad_as_bucket_view;
    bucketer_ = std::make_unique<GradientBucketer>(model_->trainable_parameters(), *group_, buckets);
    optimizer_ = setup.make_optimizer(model_->trainable_parameters());
    precision_ = setup.precision;
    scaler_ = LossScaler(precision_);
    checkpoint_every_ = options_.checkpoint_every > 0 ? options_.checkpoint_every : setup.steps_per_run;
    grad_accum_ = setup.options.levers.grad_accum;
    sync_every_microbatch_ = setup.options.levers.sync_every_microbatch;
    steps_ = 0;
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    {  // the last step's gradients, kept until now: zero_grad, optimizer work (strategy.h)
      auto zero_grad = phases.scope(Phase::Optimizer);
      bucketer_->zero_grad();
    }
    // --grad-accum: the micro-batches' gradients sum in .grad; the buckets all-reduce them after the
    // last one only (DDP's no_sync on the others), or after each under --sync-every-microbatch, each
    // round then all-reducing what .grad holds: the rounds before summed already, the same on every
    // rank, plus this rank's newest, so the sum over ranks weighted by their shares adds the newest.
    const auto micro = split_microbatches(batch, grad_accum_);
    const double share = static_cast<double>(batch.inputs.size(0)) / static_cast<double>(global_batch_);
    torch::Tensor rank_loss, global_loss;
    for (std::size_t k = 0; k < micro.size(); ++k) {
      const bool sync = k + 1 == micro.size() || sync_every_microbatch_;
      auto forward = rank_forward(micro[k].batch, *workload_, *model_, device_, *group_,
                                  broadcast_buffers_ ? buffers_ : std::vector<torch::Tensor>{}, precision_,
                                  global_batch_, phases);
      const auto loss = micro.size() > 1 ? forward.loss * micro[k].weight : forward.loss;
      rank_loss = rank_loss.defined() ? rank_loss + loss.detach() : loss.detach();
      // The loss rides in the first bucket: the rank's whole loss in the one round, or each round's own.
      if (sync) bucketer_->prepare_step(share, (sync_every_microbatch_ ? loss.detach() : rank_loss) * share, &phases);
      {
        auto scope = phases.scope(Phase::Backward);
        scaler_.scale(loss).backward();  // under fp16 the buckets carry scaled gradients
      }
      if (!sync) continue;
      {
        auto scope = phases.scope(Phase::CommExposed);
        bucketer_->wait_all();
      }
      {
        auto scope = phases.scope(Phase::Reduce);
        const auto round_loss = bucketer_->unpack();
        global_loss = global_loss.defined() ? global_loss + round_loss : round_loss;
      }
    }
    ++measured_steps_;
    {
      auto scope = phases.scope(Phase::Optimizer);
      scaler_.step(*optimizer_);  // every rank holds the same sums, so all skip or step alike
    }
    ++steps_;
    if (!options_.checkpoint_path.empty() && group_->rank() == 0 && steps_ % checkpoint_every_ == 0) {
      auto scope = phases.scope(Phase::Checkpoint);
      save_checkpoint(*model_, options_.checkpoint_path);
    }
    return global_loss;
  }

  std::vector<torch::Tensor> do_trained_parameters() override { return model_->distinct_parameters(); }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

  std::optional<CommSummary> do_comm_summary() const override {
    const auto& s = bucketer_->stats();
    if (s.steps == 0) return std::nullopt;
    CommSummary c;
    c.backend = group_->backend_name();
    c.collective_seconds_measured = group_->host_waits_for_collectives();
    // Per optimizer step: under --sync-every-microbatch a step is --grad-accum rounds of the buckets,
    // and each bucket's timeline entry below is one round's.
    const std::int64_t steps = std::max<std::int64_t>(1, measured_steps_);
    c.bytes_per_step = s.bytes / steps;
    c.buckets = bucketer_->bucket_count() * static_cast<int>(s.steps / steps);
    c.allreduce_seconds_per_step = s.busy_seconds / static_cast<double>(steps);
    c.world_size = group_->size();
    const auto rounds = static_cast<double>(s.steps);
    for (std::size_t b = 0; b < s.ready_seconds.size(); ++b) {
      c.bucket_timeline.push_back({bucketer_->bucket_bytes(b), s.ready_seconds[b] / rounds, s.allreduce_seconds[b] / rounds});
    }
    return c;
  }
  void do_reset_measured_stats() override {
    bucketer_->reset_stats();
    measured_steps_ = 0;
  }

 private:
  ProcessGroupContext* group_ = nullptr;
  const Workload* workload_ = nullptr;
  DdpOptions options_;
  std::int64_t global_batch_ = 1;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::vector<torch::Tensor> buffers_;
  bool broadcast_buffers_ = false;
  std::unique_ptr<GradientBucketer> bucketer_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
  int checkpoint_every_ = 1;
  int steps_ = 0;
  int grad_accum_ = 1;
  bool sync_every_microbatch_ = false;
  std::int64_t measured_steps_ = 0;  // optimizer steps since reset_measured_stats
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"ddp", "multi-process DistributedDataParallel: bucketed all-reduce overlapped with backward",
                            3, /*uses_all_devices=*/true, [] { return std::make_unique<DdpStrategy>(); },
                            /*multi_process=*/true});

}  // namespace ddpbench
