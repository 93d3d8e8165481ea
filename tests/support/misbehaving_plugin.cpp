// Workload plug-ins that misbehave at load time, for tests/models/test_models.cpp: built twice from
// this file, one (DDPBENCH_PLUGIN_TAKES_A_TAKEN_NAME) registering a workload under a built-in's name,
// the other (DDPBENCH_PLUGIN_CONSTRUCTOR_THROWS) one whose constructor throws. ddpbench must refuse
// each in one line with exit 2, not terminate inside dlopen.
#include <stdexcept>

#include "workloads/workload.h"

namespace misbehaving {

class Minimal : public ddpbench::Workload {
 public:
  std::string description() const override { return "a plug-in that should never be run"; }
  std::int64_t default_global_batch() const override { return 2; }
  ddpbench::ModelPtr make_model() const override { throw std::logic_error("never run"); }
  ddpbench::Dataset make_dataset(std::int64_t, std::uint64_t) const override { throw std::logic_error("never run"); }
  double flops_per_sample() const override { return 0; }
};

#ifdef DDPBENCH_PLUGIN_TAKES_A_TAKEN_NAME
class TakenName final : public Minimal {
 public:
  std::string name() const override { return "mlp"; }
};
#endif

#ifdef DDPBENCH_PLUGIN_CONSTRUCTOR_THROWS
class ThrowingConstructor final : public Minimal {
 public:
  ThrowingConstructor() { throw std::runtime_error("no licence server answered"); }
  std::string name() const override { return "throwing"; }
};
#endif

}  // namespace misbehaving

namespace ddpbench {
#ifdef DDPBENCH_PLUGIN_TAKES_A_TAKEN_NAME
using misbehaving::TakenName;
DDPBENCH_REGISTER_WORKLOAD(TakenName);
#endif
#ifdef DDPBENCH_PLUGIN_CONSTRUCTOR_THROWS
using misbehaving::ThrowingConstructor;
DDPBENCH_REGISTER_WORKLOAD(ThrowingConstructor);
#endif
}  // namespace ddpbench
