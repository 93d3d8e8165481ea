// `single`: one device trains on the whole global batch. The baseline every other strategy is
// compared with, and the reference for their parity checks.
#include "optim/optimizers.h"
#include "strategies/microbatches.h"
#include "strategies/strategy.h"

namespace ddpbench {
namespace {

class SingleStrategy final : public Strategy {
 protected:
  void do_setup(const StrategySetup& setup) override {
    workload_ = &setup.workload;
    device_ = setup.devices.device(0);
    model_ = setup.model;
    model_->to(device_);
    model_->train();
    optimizer_ = setup.make_optimizer(model_->trainable_parameters());
    precision_ = setup.precision;
    scaler_ = LossScaler(precision_);
    grad_accum_ = setup.options.levers.grad_accum;
  }

  torch::Tensor do_step(const Batch& batch, PhaseRecorder& phases) override {
    {  // the last step's, kept until now: zero_grad, optimizer work (strategy.h)
      auto zero_grad = phases.scope(Phase::Optimizer);
      set_gradients_to_none(*optimizer_);
    }
    torch::Tensor total;  // the batch's mean loss: the micro-batches' weighted sum
    for (const auto& mb : split_microbatches(batch, grad_accum_)) {
      torch::Tensor inputs, targets, loss;
      {
        auto scope = phases.scope(Phase::Data);
        inputs = mb.batch.inputs.to(device_, /*non_blocking=*/true);
        targets = mb.batch.targets.to(device_, /*non_blocking=*/true);
      }
      {
        auto scope = phases.scope(Phase::Forward);
        AutocastScope autocast(precision_, device_);
        loss = workload_->forward_loss(*model_, inputs, targets);
        if (grad_accum_ > 1) loss = loss * mb.weight;
      }
      {
        auto scope = phases.scope(Phase::Backward);
        scaler_.scale(loss).backward();  // into .grad, summed over the micro-batches
      }
      total = total.defined() ? total + loss.detach() : loss.detach();
    }
    {
      auto scope = phases.scope(Phase::Optimizer);
      scaler_.step(*optimizer_);
    }
    return total;
  }

  std::vector<torch::Tensor> do_trained_parameters() override { return model_->distinct_parameters(); }
  std::optional<c10::Device> do_batch_device() const override { return device_; }

 private:
  const Workload* workload_ = nullptr;
  c10::Device device_{c10::kCPU};
  ModelPtr model_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  Precision precision_ = Precision::Fp32;
  LossScaler scaler_{Precision::Fp32};
  int grad_accum_ = 1;
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"single", "one device, whole global batch: the baseline and parity reference", 0,
                            /*uses_all_devices=*/false, [] { return std::make_unique<SingleStrategy>(); }});

}  // namespace ddpbench
