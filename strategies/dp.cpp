// `dp`: single-process DataParallel with the loss on device 0. The replicas' outputs are gathered
// onto device 0 and the loss computed there, so device 0 holds the whole batch's outputs and their
// gradient: the memory pile-up and the gather cost this strategy exists to show.
#include <torch/csrc/autograd/autograd.h>

#include "devices/device_transfer.h"
#include "strategies/data_parallel.h"

namespace ddpbench {
namespace {

class DpStrategy final : public DataParallelStrategy {
 protected:
  torch::Tensor forward_backward(const Batch& batch, PhaseRecorder& phases, double weight) override {
    const int n = replica_count();
    std::vector<torch::Tensor> inputs;
    {
      auto scope = phases.scope(Phase::Scatter);
      inputs = scatter(batch.inputs, devices(), n);
    }
    std::vector<torch::Tensor> outputs(static_cast<size_t>(n));
    {
      auto scope = phases.scope(Phase::Forward);
      workers().run([&](int i) {
        AutocastScope autocast(precision(), devices().device(i));
        outputs[i] = replica(i).forward(inputs[i]);
      });
    }
    torch::Tensor gathered, loss;
    {
      auto scope = phases.scope(Phase::GatherLoss);
      // The gather is a leaf here; its gradient is scattered back below, which is what the
      // autograd graph of PyTorch's Gather does, but with each replica's backward on its own thread.
      std::vector<torch::Tensor> detached;
      for (const auto& o : outputs) detached.push_back(o.detach());
      gathered = gather(detached, devices(), 0).requires_grad_(true);
      AutocastScope autocast(precision(), devices().device(0));
      loss = workload().loss(gathered, copy_to_device(batch.targets, devices(), 0));
      if (weight != 1) loss = loss * weight;
    }
    {
      auto scope = phases.scope(Phase::Backward);
      const auto output_grad = torch::autograd::grad({scaler().scale(loss)}, {gathered})[0];
      const auto grads = scatter(output_grad, devices(), n);
      workers().run([&](int i) { outputs[i].backward(grads[i]); });
    }
    return loss;
  }
};

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"dp", "DataParallel: replicate each step, scatter, gather outputs and compute the loss on device 0",
                            1, true, [] { return std::make_unique<DpStrategy>(); }});

}  // namespace ddpbench
