#include "strategies/strategy.h"

#include <algorithm>
#include <chrono>

#include "base/errors.h"
#include "optim/optimizers.h"

namespace ddpbench {

OptimizerFactory training_optimizer(const Workload& workload) {
  return [&workload](std::vector<torch::Tensor> params) { return workload.make_optimizer(std::move(params)); };
}

OptimizerFactory parity_optimizer(const Workload& workload) {
  return [&workload](std::vector<torch::Tensor> params) { return workload.make_parity_optimizer(std::move(params)); };
}

void Strategy::setup(const StrategySetup& setup) {
  StrategySetup noted = setup;
  noted.make_optimizer = [this, make = setup.make_optimizer](std::vector<torch::Tensor> parameters) {
    auto optimizer = make(std::move(parameters));
    std::lock_guard<std::mutex> lock(optimizers_mutex_);
    optimizers_.push_back(optimizer.get());
    return optimizer;
  };
  const auto& policy = setup.options.levers.activation_checkpointing;
  if (policy.enabled()) {
    // Before do_setup, so that every replica a strategy clones from the model carries it.
    auto checkpointing = std::make_shared<ActivationCheckpointing>();
    checkpointing->policy = policy;
    checkpointing->recompute_scope = recompute_scope();
    setup.model->set_activation_checkpointing(std::move(checkpointing));
  }
  do_setup(noted);
}

RecomputeScope Strategy::recompute_scope() {
  return [timing = recompute_timing_]() -> std::shared_ptr<void> {
    std::unique_lock<std::mutex> lock(timing->mutex);
    if (timing->phases == nullptr) return nullptr;
    if (std::this_thread::get_id() == timing->step_thread) {
      PhaseRecorder* phases = timing->phases;
      lock.unlock();
      return std::make_shared<PhaseRecorder::Scope>(*phases, Phase::Recompute);
    }
    // An autograd device thread, or a replica's: timed on the host clock, moved out of backward.
    struct OffThread {
      std::shared_ptr<RecomputeTiming> timing;
      std::chrono::steady_clock::time_point start = std::chrono::steady_clock::now();
      ~OffThread() {
        if (!timing) return;
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        std::lock_guard<std::mutex> lock(timing->mutex);
        timing->off_thread_seconds[std::this_thread::get_id()] += seconds;
      }
    };
    auto off_thread = std::make_shared<OffThread>();
    off_thread->timing = timing;
    return off_thread;
  };
}

torch::Tensor Strategy::step(const Batch& batch, PhaseRecorder& phases, const NextBatch& next) {
  // Only for the length of this step: a strategy cannot keep asking after it returns.
  struct Reset {
    const NextBatch*& slot;
    RecomputeTiming& timing;
    ~Reset() {
      slot = nullptr;
      std::lock_guard<std::mutex> lock(timing.mutex);
      timing.phases = nullptr;
    }
  } reset{next_batch_, *recompute_timing_};
  next_batch_ = &next;
  {
    std::lock_guard<std::mutex> lock(recompute_timing_->mutex);
    recompute_timing_->phases = &phases;
    recompute_timing_->step_thread = std::this_thread::get_id();
    recompute_timing_->off_thread_seconds.clear();
  }
  auto loss = do_step(batch, phases);
  double longest = 0;
  {
    std::lock_guard<std::mutex> lock(recompute_timing_->mutex);
    for (const auto& [thread, seconds] : recompute_timing_->off_thread_seconds) longest = std::max(longest, seconds);
  }
  if (longest > 0) phases.move_measured(Phase::Backward, Phase::Recompute, longest);
  return loss;
}

HeldTensors Strategy::held_tensors() {
  HeldTensors held;
  held.parameters = do_held_parameters();
  std::lock_guard<std::mutex> lock(optimizers_mutex_);
  for (const auto* optimizer : optimizers_) {
    for (const auto& group : optimizer->param_groups())
      held.parameters.insert(held.parameters.end(), group.params().begin(), group.params().end());
    if (auto state = optimizer_state_tensors(*optimizer)) {
      held.optimizer_state.insert(held.optimizer_state.end(), state->begin(), state->end());
    } else {
      held.optimizer_state_known = false;
    }
  }
  for (const auto& p : held.parameters)
    if (p.grad().defined()) held.gradients.push_back(p.grad());
  do_held_tensors(held);
  return held;
}

const char* to_string(HogwildMode mode) { return mode == HogwildMode::Threads ? "threads" : "processes"; }

std::string CaseSpec::name() const { return workload + "/" + strategy + "/world:" + std::to_string(world_size); }

StrategyRegistry& StrategyRegistry::instance() {
  static StrategyRegistry registry;
  return registry;
}

void StrategyRegistry::add(StrategyInfo info) {
  for (const auto& s : strategies_) {
    if (s.name == info.name) throw std::logic_error("strategy '" + info.name + "' registered twice");
  }
  strategies_.push_back(std::move(info));
  std::stable_sort(strategies_.begin(), strategies_.end(),
                   [](const StrategyInfo& a, const StrategyInfo& b) { return a.display_order < b.display_order; });
}

const StrategyInfo& StrategyRegistry::get(const std::string& name) const {
  for (const auto& s : strategies_) {
    if (s.name == name) return s;
  }
  std::string known;
  for (const auto& n : names()) known += (known.empty() ? "" : ", ") + n;
  throw UsageError("--strategy: unknown strategy '" + name + "' (known: " + known + ", all)");
}

std::vector<std::string> StrategyRegistry::names() const {
  std::vector<std::string> out;
  for (const auto& s : strategies_) out.push_back(s.name);
  return out;
}

}  // namespace ddpbench
