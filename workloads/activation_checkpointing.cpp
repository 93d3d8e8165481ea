#include "workloads/activation_checkpointing.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <torch/autograd.h>

#include <cstdlib>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <utility>

#include "compat/torch_compat.h"

namespace ddpbench {

bool CheckpointPolicy::checkpoints(std::size_t unit) const {
  switch (kind) {
    case Kind::None: return false;
    case Kind::Full: return true;
    case Kind::Every: return (unit + 1) % static_cast<std::size_t>(every) == 0;
  }
  return false;
}

std::string CheckpointPolicy::to_string() const {
  switch (kind) {
    case Kind::None: return "none";
    case Kind::Full: return "full";
    case Kind::Every: return "every:" + std::to_string(every);
  }
  return "none";
}

CheckpointPolicy CheckpointPolicy::parse(const std::string& text) {
  CheckpointPolicy p;
  if (text == "none") return p;
  if (text == "full") {
    p.kind = Kind::Full;
    return p;
  }
  const std::string prefix = "every:";
  if (text.rfind(prefix, 0) == 0) {
    const std::string n = text.substr(prefix.size());
    const bool digits = !n.empty() && n.size() <= 6 && n.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::atoi(n.c_str()) < 1) {
      throw std::invalid_argument("'" + text + "': every:N takes a whole N of 1 or more (every:1 is full)");
    }
    p.kind = Kind::Every;
    p.every = std::atoi(n.c_str());
    return p;
  }
  throw std::invalid_argument("unknown policy '" + text + "' (expected none, full or every:N)");
}

namespace {

// The generators a unit may draw from, and their states when forward ran it.
struct RngStates {
  torch::Tensor cpu;
  std::optional<c10::Device> device;  // the input's, when it is a GPU
  torch::Tensor on_device;
};

torch::Tensor state_of(at::Generator generator) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}
void set_state(at::Generator generator, const torch::Tensor& state) {
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

RngStates capture_rng(const c10::Device& device) {
  RngStates s;
  s.cpu = state_of(at::detail::getDefaultCPUGenerator());
  if (!device.is_cpu()) {
    s.device = device;
    s.on_device = state_of(at::globalContext().defaultGenerator(device));
  }
  return s;
}

// Sets the generators to `saved` for as long as it lives, then puts back what they held: the
// recomputation draws forward's numbers, and the rest of backward draws on as if it had not run.
class RngRestored {
 public:
  explicit RngRestored(const RngStates& saved) : saved_(saved), now_(capture_rng(saved.device.value_or(c10::kCPU))) {
    apply(saved_);
  }
  ~RngRestored() { apply(now_); }
  RngRestored(const RngRestored&) = delete;
  RngRestored& operator=(const RngRestored&) = delete;

 private:
  static void apply(const RngStates& s) {
    set_state(at::detail::getDefaultCPUGenerator(), s.cpu);
    if (s.device) set_state(at::globalContext().defaultGenerator(*s.device), s.on_device);
  }
  const RngStates& saved_;
  RngStates now_;
};

// Autocast as forward had it, on the thread that recomputes (autocast is thread-local, and backward
// runs with it off).
class AutocastRestored {
 public:
  AutocastRestored(std::optional<c10::ScalarType> cpu, std::optional<c10::ScalarType> cuda) : cpu_(cpu), cuda_(cuda) {
    if (cpu_) cpu_previous_ = compat::autocast_enter(c10::kCPU, *cpu_);
    if (cuda_) cuda_previous_ = compat::autocast_enter(c10::kCUDA, *cuda_);
  }
  ~AutocastRestored() {
    if (cuda_) compat::autocast_exit(c10::kCUDA, cuda_previous_);
    if (cpu_) compat::autocast_exit(c10::kCPU, cpu_previous_);
  }
  AutocastRestored(const AutocastRestored&) = delete;
  AutocastRestored& operator=(const AutocastRestored&) = delete;

 private:
  std::optional<c10::ScalarType> cpu_, cuda_;
  compat::AutocastState cpu_previous_, cuda_previous_;
};

// What backward needs besides the input: the unit, how to time it, and forward's RNG and autocast.
struct CheckpointState : torch::CustomClassHolder {
  std::function<torch::Tensor(const torch::Tensor&)> body;
  RecomputeScope recompute_scope;
  RngStates rng;
  std::optional<c10::ScalarType> cpu_autocast, cuda_autocast;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  // `requires_grad_anchor`: a tensor that requires a gradient and is never used, so that the output
  // requires one where the input does not (a first unit's input is the batch): a custom function's
  // output requires a gradient only where one of its tensor inputs does, and the parameters the
  // unit uses are not its inputs.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& input,
                               const torch::Tensor& requires_grad_anchor, c10::intrusive_ptr<CheckpointState> state) {
    (void)requires_grad_anchor;
    state->rng = capture_rng(input.device());
    state->cpu_autocast = compat::autocast_dtype(c10::kCPU);
    state->cuda_autocast = compat::autocast_dtype(c10::kCUDA);
    ctx->save_for_backward({input});
    auto output = state->body(input);  // a custom function's forward runs with grad off
    ctx->saved_data["state"] = c10::IValue::make_capsule(std::move(state));
    return output;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    auto* state = static_cast<CheckpointState*>(ctx->saved_data.at("state").toCapsule().get());
    const bool input_needs_grad = saved.at(0).requires_grad();
    auto input = saved.at(0).detach().requires_grad_(input_needs_grad);
    torch::Tensor output;
    {
      std::shared_ptr<void> timed = state->recompute_scope ? state->recompute_scope() : nullptr;
      torch::AutoGradMode grad_on(true);
      RngRestored rng(state->rng);
      AutocastRestored autocast(state->cpu_autocast, state->cuda_autocast);
      output = state->body(input);
    }
    // Accumulates into the parameters' gradients (and the input's), firing their hooks as a
    // backward without checkpointing would: ddp's buckets and fsdp's reduce-scatters see no difference.
    if (output.requires_grad() && grad_outputs.at(0).defined()) {
      torch::autograd::backward({output}, {grad_outputs.at(0)});
    }
    return {input_needs_grad ? input.grad() : torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor run_checkpointed(const torch::Tensor& input, std::function<torch::Tensor(const torch::Tensor&)> body,
                               const RecomputeScope& recompute_scope) {
  // Under no-grad (an evaluation pass) there is no backward to recompute for.
  if (!torch::GradMode::is_enabled()) return body(input);
  auto state = c10::make_intrusive<CheckpointState>();
  state->body = std::move(body);
  state->recompute_scope = recompute_scope;
  const auto anchor = torch::empty({0}, torch::TensorOptions().dtype(torch::kFloat).device(input.device())).requires_grad_(true);
  return CheckpointFunction::apply(input, anchor, std::move(state));
}

}  // namespace ddpbench
