#pragma once
// Workloads that come from outside the executable: TorchScript models (--model, --model-set) and
// plug-in libraries (--workload-lib). Every process of a run must load the same ones before it
// looks a workload up: the launcher's ranks get them on their command line, hogwild's worker
// processes in an environment variable; both carry the resolved record, not the user's spelling.
#include <optional>
#include <string>
#include <vector>

#include "models/scripted_workload.h"

namespace ddpbench {

struct WorkloadSources {
  std::vector<std::string> libraries;  // --workload-lib, in order
  std::optional<ModelSource> model;    // --model, with its resolved settings

  bool empty() const { return libraries.empty() && !model; }
  std::string to_json() const;
  // Throws std::runtime_error on a malformed record (it is ours, never the user's).
  static WorkloadSources from_json(const std::string& text);
};

// The environment variable a hogwild worker process finds the run's WorkloadSources in.
constexpr const char* kWorkloadSourcesVariable = "DDPBENCH_WORKLOAD_SOURCES";

// Loads each library (dlopen; its static registrations add workloads) and the model with its
// sidecar and `model_settings` (--model-set), once per process, and records them for
// installed_workload_sources(). Returns the names of the workloads they registered. Throws
// UsageError naming --workload-lib, --model or --model-set.
std::vector<std::string> install_workload_sources(const std::vector<std::string>& libraries, const std::string& model_path,
                                                  const std::vector<std::string>& model_settings);
// The same from a launcher's record: the model's settings as resolved there, no sidecar read.
void install_workload_sources(const WorkloadSources& sources);
// What this process installed: what its rank and worker processes must install too.
const WorkloadSources& installed_workload_sources();

}  // namespace ddpbench
