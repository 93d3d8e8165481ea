// Strategies that are part of ddpbench's design but not implemented yet. They appear in --list
// and in `all`, and every case of theirs is reported as skipped with this reason. Each moves to
// its own file when implemented, and its line here goes.
#include "harness/strategy.h"

namespace ddpbench {
namespace {

class PlannedStrategy final : public Strategy {
 public:
  explicit PlannedStrategy(std::string reason) : reason_(std::move(reason)) {}

 protected:
  std::optional<std::string> do_unsupported_reason(const CaseSpec&, const DeviceSet&) const override {
    return reason_;
  }
  // Never reached: the harness runs no case whose strategy is unsupported.
  void do_setup(const StrategySetup&) override { throw std::logic_error(reason_); }
  torch::Tensor do_step(const Batch&, PhaseRecorder&) override { throw std::logic_error(reason_); }
  std::vector<torch::Tensor> do_trained_parameters() override { throw std::logic_error(reason_); }

 private:
  std::string reason_;
};

std::function<std::unique_ptr<Strategy>()> planned(const char* what) {
  return [what] { return std::make_unique<PlannedStrategy>(std::string("not implemented yet: ") + what); };
}

}  // namespace

DDPBENCH_REGISTER_STRATEGY({"hogwild", "lock-free updates of shared parameters by N workers",
                            4, true, planned("Hogwild is planned")});

}  // namespace ddpbench
