#pragma once
// What a user's model eats and how it is trained: the sidecar JSON next to a TorchScript file
// (resnet50.pt -> resnet50.json, written by scripts/ddpbench-export) and the --model-set KEY=VALUE
// flags, which take the same keys and win over the sidecar. One parser for both, so a key means the
// same in either place; docs/models.md lists the keys.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ddpbench {

struct ModelSpec {
  enum class Input { Float, Tokens };    // float samples of `input_shape`, or token ids below `vocab`
  enum class Target { Class, NextToken, Regression };
  enum class Loss { CrossEntropy, Mse };
  enum class Optimizer { Sgd, AdamW };

  std::string name;                       // the workload's name in case names (default: the file's stem)
  Input input = Input::Float;
  std::vector<std::int64_t> input_shape;  // one sample's shape
  Target target = Target::Class;
  std::int64_t classes = 0;               // target class:N
  std::int64_t vocab = 0;                 // token ids are in [0, vocab)
  Loss loss = Loss::CrossEntropy;
  Optimizer optimizer = Optimizer::Sgd;
  double lr = 0.01;
  double momentum = 0.9;                  // sgd
  double weight_decay = 0;
  std::int64_t global_batch = 32;
  double flops_per_sample = 0;            // forward + backward; 0: unknown
  // Parameters saved with requires_grad False (fine-tuning's frozen layers): kept frozen, as PyTorch
  // trains them (no gradient, no optimizer state, no traffic), or trained like the rest ("train").
  bool train_frozen = false;

  // The spec as KEY=VALUE settings, every key present: parsing them back gives this spec.
  std::map<std::string, std::string> settings() const;
  // "input float:3x32x32, target class:10, cross-entropy, sgd lr 0.1 momentum 0.9"
  std::string summary() const;
};

// Settings from the sidecar JSON at `path` (an object of the keys docs/models.md lists; numbers or
// strings). Throws UsageError naming the file, and the key where one is at fault.
std::map<std::string, std::string> read_model_sidecar(const std::string& path);

// "KEY=VALUE" of --model-set into `settings`, replacing the sidecar's. Throws UsageError naming --model-set.
void apply_model_setting(const std::string& assignment, std::map<std::string, std::string>& settings);

// The spec the settings describe, every key checked and the combination too (a next-token target
// needs token inputs; mse needs a regression target). `source` names where the settings came from
// in messages ("resnet18.json and --model-set"). Throws UsageError naming the key.
ModelSpec parse_model_spec(const std::map<std::string, std::string>& settings, const std::string& default_name,
                           const std::string& source);

}  // namespace ddpbench
