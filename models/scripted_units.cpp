#include "models/scripted_units.h"

#include <torch/csrc/jit/api/function_impl.h>
#include <torch/csrc/jit/ir/ir.h>
#include <torch/library.h>

#include <functional>
#include <map>
#include <set>

#include "base/errors.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

using torch::jit::Graph;
using torch::jit::Node;
using torch::jit::Value;

// The hooks of the strategy whose model this thread is running through forward_in_units. A
// thread-local, because the graph's operators take no pointer: each rank, replica or worker runs
// its own model on its own thread.
thread_local UnitCallHooks* active_hooks = nullptr;

void enter_unit(std::int64_t unit) {
  if (active_hooks != nullptr) active_hooks->before_unit(static_cast<std::size_t>(unit));
}

at::Tensor leave_unit(std::int64_t unit, const at::Tensor& output) {
  return active_hooks != nullptr ? active_hooks->after_unit(static_cast<std::size_t>(unit), output) : output;
}

const auto enter_unit_symbol = c10::Symbol::fromQualString("ddpbench::enter_unit");
const auto leave_unit_symbol = c10::Symbol::fromQualString("ddpbench::leave_unit");

// A tensor, or a tuple (nested or not) of tensors only: what a unit may return.
bool tensors_only(const c10::TypePtr& type) {
  if (type->kind() == c10::TypeKind::TensorType) return true;
  if (type->kind() != c10::TypeKind::TupleType) return false;
  for (const auto& element : type->containedTypes()) {
    if (!tensors_only(element)) return false;
  }
  return true;
}


void each_node(torch::jit::Block* block, const std::function<void(Node*)>& visit) {
  for (Node* n : block->nodes()) {
    visit(n);
    for (torch::jit::Block* inner : n->blocks()) each_node(inner, visit);
  }
}

std::string joined(const std::string& path, const std::string& name) { return path.empty() ? name : path + "." + name; }

bool overlaps(const std::string& a, const std::string& b) {
  const auto under = [](const std::string& inner, const std::string& outer) {
    return inner.size() > outer.size() && inner.compare(0, outer.size(), outer) == 0 && inner[outer.size()] == '.';
  };
  return a == b || under(a, b) || under(b, a);
}

// The attribute of `module` at `path` ("layers.0"), or a None IValue when something on the way is
// not an object.
c10::IValue attribute_at(const torch::jit::Module& module, const std::string& path) {
  c10::IValue value = module._ivalue();
  std::size_t start = 0;
  while (start <= path.size()) {
    const auto dot = path.find('.', start);
    const std::string name = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    if (!value.isObject() || !value.toObjectRef().type()->hasAttribute(name)) return c10::IValue();
    value = value.toObjectRef().getAttr(name);
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  return value;
}

std::vector<torch::Tensor> parameters_at(const torch::jit::Module& module, const std::string& path) {
  const auto value = attribute_at(module, path);
  std::vector<torch::Tensor> out;
  if (!value.isModule()) return out;
  for (const auto& p : torch::jit::Module(value.toObject()).parameters(/*recurse=*/true)) out.push_back(p);
  return out;
}

// Replaces forward's calls to the module's own methods (torchvision's _forward_impl, say) with
// their bodies, so that the submodule calls they make are forward's own. Returns false when
// methods call each other deeper than any real model does (recursion is not TorchScript, but a
// bound keeps a hostile file from looping here).
bool inline_own_methods(Graph& graph, const torch::jit::Module& module) {
  Value* self = graph.inputs()[0];
  for (int round = 0; round < 256; ++round) {
    Node* call = nullptr;
    each_node(graph.block(), [&](Node* n) {
      if (call == nullptr && n->kind() == c10::prim::CallMethod && n->input(0) == self) call = n;
    });
    if (call == nullptr) return true;
    const auto method = module.find_method(call->s(c10::attr::name));
    if (!method) return false;
    // The method's own graph, with its submodule calls still calls (inlineCallTo's default is the
    // optimized graph, every call inlined).
    auto& callee = torch::jit::toGraphFunction(method->function());
    torch::jit::inlineCallTo(call, &callee, callee.graph().get());
  }
  return false;
}

// One unit's call in forward's graph.
struct UnitCall {
  std::string path;
  Node* call;
};

// The units of `graph` (forward, its own methods inlined), or the reason it is one unit.
std::vector<UnitCall> find_units(Graph& graph, const torch::jit::Module& module, std::string& reason,
                                 std::vector<std::string>& held_whole) {
  Value* self = graph.inputs()[0];
  // Every value read from self by attribute, in the graph's order (so the reason named is the first).
  std::map<Value*, std::string> path_of{{self, ""}};
  std::vector<std::pair<Value*, std::string>> paths{{self, ""}};
  each_node(graph.block(), [&](Node* n) {
    if (n->kind() != c10::prim::GetAttr) return;
    const auto from = path_of.find(n->input(0));
    if (from == path_of.end()) return;
    const auto path = joined(from->second, n->s(c10::attr::name));
    path_of[n->output()] = path;
    paths.emplace_back(n->output(), path);
  });

  std::vector<std::pair<std::string, std::string>> reads;  // path, how forward uses it other than by calling it
  std::map<Node*, std::string> top_level_calls;
  std::vector<std::string> nested_calls;  // submodules called inside a branch or a loop
  for (const auto& [value, path] : paths) {
    for (const auto& use : value->uses()) {
      Node* user = use.user;
      if (user->kind() == c10::prim::GetAttr && use.offset == 0) continue;  // a step down the path
      if (value == self) {
        reason = "forward passes the module itself to " + std::string(user->kind().toQualString());
        return {};
      }
      const bool is_call = user->kind() == c10::prim::CallMethod && use.offset == 0;
      if (is_call && user->owningBlock() == graph.block()) {
        top_level_calls[user] = path;
      } else if (is_call) {
        reads.emplace_back(path, "calls '" + path + "' inside a branch or a loop");
        nested_calls.push_back(path);
      } else {
        reads.emplace_back(path, "reads '" + path + "' directly");
      }
    }
  }

  // The candidates: submodules holding parameters that forward's straight-line code calls, in order.
  std::vector<UnitCall> calls;
  std::map<std::string, int> times_called;
  for (Node* n : graph.nodes()) {
    const auto call = top_level_calls.find(n);
    if (call == top_level_calls.end()) continue;
    if (parameters_at(module, call->second).empty()) continue;  // nothing to shard: an activation, a pooling
    calls.push_back({call->second, n});
    ++times_called[call->second];
  }
  // Every tensor forward reads outside the calls, and the path it reads it by.
  std::map<const void*, std::string> read_outside;
  for (const auto& [path, how] : reads) {
    const auto value = attribute_at(module, path);
    if (value.isTensor()) read_outside.emplace(value.toTensor().unsafeGetTensorImpl(), how);
    for (const auto& p : parameters_at(module, path)) read_outside.emplace(p.unsafeGetTensorImpl(), how);
  }
  // A candidate that a split could break stays in the root, held for the whole step.
  std::map<std::string, std::string> excluded;  // path -> why
  std::map<const void*, std::string> owner;     // parameter -> the candidate that holds it
  for (const auto& c : calls) {
    const auto exclude = [&](const std::string& path, const std::string& why) { excluded.emplace(path, why); };
    if (times_called[c.path] > 1) exclude(c.path, "forward calls it more than once");
    if (c.call->outputs().size() != 1 || !tensors_only(c.call->output()->type())) {
      exclude(c.path, "it returns " + (c.call->outputs().size() == 1 ? c.call->output()->type()->str() : "several values") +
                          ", not a tensor or a tuple of tensors");
    }
    for (const auto& other : calls) {
      if (other.path != c.path && overlaps(other.path, c.path)) exclude(c.path, "forward also calls '" + other.path + "'");
    }
    for (const auto& p : parameters_at(module, c.path)) {
      const auto outside = read_outside.find(p.unsafeGetTensorImpl());
      if (outside != read_outside.end()) exclude(c.path, "forward " + outside->second);
      const auto [it, fresh] = owner.emplace(p.unsafeGetTensorImpl(), c.path);
      if (!fresh && it->second != c.path) {
        exclude(c.path, "it shares a parameter with '" + it->second + "'");
        exclude(it->second, "it shares a parameter with '" + c.path + "'");
      }
    }
  }
  std::vector<UnitCall> units;
  std::set<std::string> listed;
  for (const auto& c : calls) {
    const auto why = excluded.find(c.path);
    if (why == excluded.end()) {
      units.push_back(c);
    } else if (listed.insert(c.path).second) {
      held_whole.push_back(c.path + " (" + why->second + ")");
    }
  }
  for (const auto& path : nested_calls) {
    if (excluded.count(path) == 0 && !parameters_at(module, path).empty() && listed.insert(path).second) {
      held_whole.push_back(path + " (forward calls it inside a branch or a loop)");
    }
  }
  if (units.empty()) {
    reason = held_whole.empty() ? "forward calls no submodule that holds parameters"
                                : "no submodule it calls can be gathered alone: " + held_whole.front();
  }
  return units;
}

// Whether `graph` (forward, its own methods inlined) is a chain of `units`' calls, and its links:
// nothing at the top level but reading submodules and calling them, each call's one input the
// output of the call before (the graph's input for the first) used by nothing else, the last call's
// output returned. Fills `plan`'s chain or says why not.
void find_chain(Graph& graph, const std::vector<UnitCall>& units, ScriptedUnits& plan) {
  if (units.empty()) {
    plan.chain_refusal = "it is one wrap unit (" + plan.reason + ")";
    return;
  }
  if (!plan.held_whole.empty()) {
    plan.chain_refusal = "forward calls " + plan.held_whole.front() + ", which no stage could hold alone";
    return;
  }
  std::map<Value*, std::string> path_of{{graph.inputs()[0], ""}};
  std::vector<std::pair<std::string, bool>> calls;  // path, holds a unit
  std::size_t next_unit = 0;
  Value* current = graph.inputs()[1];
  for (Node* n : graph.nodes()) {
    if (n->kind() == c10::prim::GetAttr && path_of.count(n->input(0))) {
      path_of[n->output()] = joined(path_of[n->input(0)], n->s(c10::attr::name));
      continue;
    }
    if (n->kind() == c10::prim::Constant) continue;  // an argument: the node that takes it decides
    const bool a_call = n->kind() == c10::prim::CallMethod && n->s(c10::attr::name) == "forward" && n->inputs().size() == 2 &&
                        path_of.count(n->input(0)) && n->outputs().size() == 1;
    if (!a_call) {
      plan.chain_refusal = "forward does more than call its submodules in turn, each on the one before's output (" +
                           std::string(n->kind().toQualString()) + ")";
      return;
    }
    const std::string path = path_of[n->input(0)];
    if (n->input(1) != current || current->uses().size() != 1) {
      plan.chain_refusal = "forward passes " + (calls.empty() ? std::string("its input") : "'" + calls.back().first + "''s output") +
                           " to more than the next submodule, or '" + path + "' another value (a residual or a skip connection)";
      return;
    }
    const bool unit = next_unit < units.size() && units[next_unit].call == n;
    if (unit) ++next_unit;
    calls.emplace_back(path, unit);
    current = n->output();
  }
  if (graph.outputs().size() != 1 || graph.outputs()[0] != current || current->uses().size() != 1 || next_unit != units.size()) {
    plan.chain_refusal = "forward does not return the last submodule's output alone";
    return;
  }
  for (const auto& [path, unit] : calls) {
    if (unit) {
      plan.chain.push_back({path});
    } else if (plan.chain.empty()) {
      plan.chain_head.push_back(path);
    } else {
      plan.chain.back().push_back(path);
    }
  }
}

// Routes `value` through ddpbench::leave_unit(index, ...) at the graph's insert point: a tensor
// directly, a tuple (nn.GRU's (output, h_n), nn.LSTM's (output, (h_n, c_n))) element by element,
// unpacked and built again, so that every tensor of a unit's output carries the unit's backward
// hook, as FSDP2 hooks each tensor of a module's output.
Value* route_through_leave_unit(Graph& graph, Value* value, std::int64_t index) {
  if (value->type()->kind() == c10::TypeKind::TensorType) {
    return graph.insert(leave_unit_symbol, {torch::jit::NamedValue(index), torch::jit::NamedValue(value)});
  }
  Node* unpack = graph.insertNode(graph.createTupleUnpack(value));
  std::vector<Value*> elements;
  for (Value* element : unpack->outputs()) elements.push_back(route_through_leave_unit(graph, element, index));
  return graph.insertNode(graph.createTuple(elements))->output();
}

// Puts ddpbench::enter_unit(k) before unit k's call and routes its output through
// ddpbench::leave_unit(k, output) (each tensor of a tuple).
void insert_hooks(Graph& graph, const std::vector<UnitCall>& units) {
  for (std::size_t k = 0; k < units.size(); ++k) {
    Node* call = units[k].call;
    const auto index = static_cast<std::int64_t>(k);
    {
      torch::jit::WithInsertPoint before(call);
      graph.insert(enter_unit_symbol, {torch::jit::NamedValue(index)});
    }
    Value* output = call->output();
    const std::vector<torch::jit::Use> uses = output->uses();  // before the hooks add theirs
    Value* hooked = nullptr;
    {
      torch::jit::WithInsertPoint after(call->next());
      hooked = route_through_leave_unit(graph, output, index);
    }
    // Every earlier use of the call's output reads the hooked value; the hooks still read the call's.
    for (const auto& use : uses) use.user->replaceInput(use.offset, hooked);
  }
}

}  // namespace

std::string ScriptedUnits::summary() const {
  if (paths.empty()) return "one wrap unit (fsdp): " + reason;
  std::string listed;
  const std::size_t shown = paths.size() <= 12 ? paths.size() : 10;
  for (std::size_t i = 0; i < shown; ++i) listed += (i ? ", " : "") + paths[i];
  if (shown < paths.size()) listed += " and " + std::to_string(paths.size() - shown) + " more";
  std::string held;
  for (std::size_t i = 0; i < held_whole.size(); ++i) held += (i ? ", " : "") + held_whole[i];
  return "wrap units (fsdp): " + std::to_string(paths.size()) + (paths.size() == 1 ? " submodule" : " submodules") +
         " in forward's order: " + listed + (held.empty() ? "" : "; held whole with the root: " + held);
}

ScriptedUnits plan_scripted_units(const torch::jit::Module& module) {
  ScriptedUnits plan;
  const auto forward = module.find_method("forward");
  if (!forward) {
    plan.reason = plan.chain_refusal = "the module has no forward method";
    return plan;
  }
  auto graph = torch::jit::toGraphFunction(forward->function()).graph()->copy();
  if (graph->inputs().size() != 2) {
    plan.reason = plan.chain_refusal = "forward takes " + std::to_string(graph->inputs().size() - 1) + " inputs, not one";
    return plan;
  }
  if (!inline_own_methods(*graph, module)) {
    plan.reason = plan.chain_refusal = "forward calls methods of the module that cannot be followed";
    return plan;
  }
  const auto units = find_units(*graph, module, plan.reason, plan.held_whole);
  find_chain(*graph, units, plan);
  if (units.empty()) return plan;
  insert_hooks(*graph, units);
  for (const auto& u : units) plan.paths.push_back(u.path);
  plan.forward = std::make_shared<torch::jit::GraphFunction>(c10::QualifiedName("ddpbench.forward_in_units"), graph, nullptr);
  return plan;
}

std::vector<torch::Tensor> unit_parameters(const torch::jit::Module& module, const std::string& path) {
  return parameters_at(module, path);
}

torch::Tensor call_submodule(const torch::jit::Module& module, const std::string& path, const torch::Tensor& input) {
  auto output = attribute_at(module, path).toModule().forward({input});
  if (!output.isTensor()) {
    throw CaseFailure("--model: submodule '" + path + "' returned " + std::string(output.tagKind()) + ", not one tensor");
  }
  return output.toTensor();
}

torch::Tensor forward_in_units(const ScriptedUnits& units, const torch::jit::Module& module, const torch::Tensor& input,
                               UnitCallHooks& hooks) {
  struct Active {
    UnitCallHooks* outer = active_hooks;
    explicit Active(UnitCallHooks* hooks) { active_hooks = hooks; }
    ~Active() { active_hooks = outer; }
  } active(&hooks);
  torch::jit::Stack stack{c10::IValue(module._ivalue()), c10::IValue(input)};
  units.forward->run(stack);
  if (stack.empty() || !stack.back().isTensor()) {
    throw CaseFailure("--model: the model's forward returned " +
                      std::string(stack.empty() ? "nothing" : stack.back().tagKind()) + ", not one tensor");
  }
  return stack.back().toTensor();
}

}  // namespace ddpbench

// The two operators the unit-split forward calls. CONSERVATIVE: they have effects the graph cannot
// see (gathering and freeing the unit's parameters), so no pass may drop or move them.
TORCH_LIBRARY(ddpbench, m) {
  m.def(torch::schema("enter_unit(int unit) -> ()", c10::AliasAnalysisKind::CONSERVATIVE), &ddpbench::enter_unit);
  m.def(torch::schema("leave_unit(int unit, Tensor output) -> Tensor", c10::AliasAnalysisKind::CONSERVATIVE),
        &ddpbench::leave_unit);
}
