#pragma once
// A user's TorchScript module (torch.jit.save) as a workload, run unchanged under every strategy:
// its parameters and buffers are those of a WorkloadModel, so cloning, moving, sharing and
// converting them is the harness's usual code, and the module's own forward runs on them.
#include <map>
#include <string>
#include <vector>

namespace ddpbench {

// A TorchScript file and the settings it is trained with (its sidecar's, then --model-set's).
struct ModelSource {
  std::string path;
  std::map<std::string, std::string> settings;  // resolved: every key of ModelSpec::settings()
  bool operator==(const ModelSource& other) const { return path == other.path && settings == other.settings; }
};

// Reads `path` (a TorchScript module) and, with `read_sidecar`, its sidecar (the path with its
// extension replaced by .json; optional where `overrides` say enough), applies the KEY=VALUE
// `overrides` (a rank or worker process gets every key resolved, and reads no sidecar: the
// launcher's reading is the one that counts, whatever happens to the file later), checks the spec
// against the model with a forward pass on two samples of the synthetic data, and registers the
// workload (replacing one registered earlier in this process from a model file). Throws UsageError
// naming --model, the sidecar's key or --model-set.
ModelSource register_scripted_model(const std::string& path, const std::vector<std::string>& overrides,
                                    bool read_sidecar = true);

// The sidecar ddpbench reads for `model_path`: resnet50.pt -> resnet50.json.
std::string sidecar_path(const std::string& model_path);

}  // namespace ddpbench
