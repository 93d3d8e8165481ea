// `dp-loss-in-model`: DataParallel where each replica computes its own loss on its own device
// (targets are scattered too); only the N scalar losses are gathered. Each replica's loss is
// weighted by its share of the batch, so their sum, and its gradient, equal `single`'s mean loss
// over the global batch, even for uneven splits.
#include "devices/device_transfer.h"
#include "strategies/data_parallel.h"

namespace ddpbench {
namespace {

class DpLossInModelStrategy final : public DataParallelStrategy {
 protected:
  torch::Tensor forward_backward(const Batch& batch, PhaseRecorder& phases, double weight) override {
    const int n = replica_count();
    std::vector<torch::Tensor> inputs, targets;
    {
      auto scope = phases.scope(Phase::Scatter);
      inputs = scatter(batch.inputs, devices(), n);
      targets = scatter(batch.targets, devices(), n);
    }
    const double total = static_cast<double>(batch.inputs.size(0));
    std::vector<torch::Tensor> losses(static_cast<size_t>(n));
    {
      auto scope = phases.scope(Phase::Forward);
      workers().run([&](int i) {
        const double share = weight * static_cast<double>(inputs[i].size(0)) / total;
        AutocastScope autocast(precision(), devices().device(i));
        losses[i] = workload().forward_loss(replica(i), inputs[i], targets[i]) * share;
      });
    }
    torch::Tensor loss;
    {
      auto scope = phases.scope(Phase::GatherLoss);
      std::vector<torch::Tensor> scalars;
      for (const auto& l : losses) scalars.push_back(l.detach().reshape({1}));
      loss = gather(scalars, devices(), 0).sum();
    }
    {
      auto scope = phases.scope(Phase::Backward);
      workers().run([&](int i) { scaler().scale(losses[i]).backward(); });
    }
    return loss;
  }
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"dp-loss-in-model", "DataParallel with the loss computed inside each replica (balanced memory)",
                            2, true, [] { return std::make_unique<DpLossInModelStrategy>(); }});

}  // namespace ddpbench
