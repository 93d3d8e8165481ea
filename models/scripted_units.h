#pragma once
// A TorchScript module's wrap units, and the forward that runs each between a strategy's hooks.
//
// A built-in workload calls its units through WorkloadModel::call_unit; a TorchScript module's
// forward is the user's, so the seam is made on its graph instead: the units are the submodules
// that forward calls (after inlining the module's own helper methods such as torchvision's
// _forward_impl), and a copy of the graph gets a ddpbench::enter_unit node before each such call
// and a ddpbench::leave_unit node after it; those two operators call the UnitCallHooks of the
// thread that runs the copy. Only a strategy that installs hooks (fsdp) runs the copy; every other
// strategy runs the module's own forward, untouched.
//
// A submodule is a unit only where gathering it for its call alone cannot change what forward
// computes: forward's own straight-line code (not a branch or loop) calls it once, it returns a
// tensor or a tuple of tensors (each routed through leave_unit), it shares no parameter with another unit, and forward reads none of its parameters
// outside that call. A submodule that fails one of these stays with the root (held whole for the
// step) and `held_whole` says why; with no unit left the module is one unit and `reason` says why.
#include <torch/csrc/jit/api/module.h>

#include <memory>
#include <string>
#include <vector>

namespace torch::jit {
struct GraphFunction;
}

namespace ddpbench {

class UnitCallHooks;

struct ScriptedUnits {
  // The units' submodule paths ("conv1", "layers.0"), in forward's call order; empty: one unit.
  std::vector<std::string> paths;
  std::string reason;  // why one unit, when `paths` is empty
  // Submodules forward calls that are not units, each with why ("again (forward calls it more than
  // once)"): their parameters are the root's, held for the whole step.
  std::vector<std::string> held_whole;
  // forward with the hooks around each unit's call; null when one unit.
  std::shared_ptr<torch::jit::GraphFunction> forward;

  // The module as a chain, what `pp` cuts between stages: forward only calls submodules in turn,
  // each on what the one before returned (nn.Sequential, exported). Chain unit k is wrap unit k's
  // call and the calls without parameters after it (an activation); `chain_head` the calls before
  // the first unit. Empty `chain`: no chain, and `chain_refusal` says why.
  std::vector<std::vector<std::string>> chain;
  std::vector<std::string> chain_head;
  std::string chain_refusal;

  // "wrap units (fsdp): its submodules conv1, layer1 in forward's order" or "one wrap unit (fsdp): ...".
  std::string summary() const;
};

// Reads `module`'s forward and decides its units.
ScriptedUnits plan_scripted_units(const torch::jit::Module& module);

// The parameters of the submodule at `path` of `module` (one from plan_scripted_units).
std::vector<torch::Tensor> unit_parameters(const torch::jit::Module& module, const std::string& path);

// `module`'s submodule at `path` called on `input` (a chain's link); its output must be one tensor.
torch::Tensor call_submodule(const torch::jit::Module& module, const std::string& path, const torch::Tensor& input);

// Runs `units.forward` (not null) on `module` and `input`, calling `hooks` around each unit. The
// module's forward must return one tensor; anything else throws CaseFailure.
torch::Tensor forward_in_units(const ScriptedUnits& units, const torch::jit::Module& module, const torch::Tensor& input,
                               UnitCallHooks& hooks);

}  // namespace ddpbench
