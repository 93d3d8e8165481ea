#include "models/workload_sources.h"

#include <dlfcn.h>

#include <algorithm>
#include <nlohmann/json.hpp>
#include <stdexcept>

#include "base/errors.h"
#include "workloads/workload.h"

namespace ddpbench {

namespace {

WorkloadSources& installed() {
  static WorkloadSources sources;
  return sources;
}

// dlopen()s `path`; the library's DDPBENCH_REGISTER_WORKLOAD objects register into this
// executable's registry (it exports its symbols: ENABLE_EXPORTS). A library loaded before is not
// loaded again (dlopen hands back the same handle and runs no initialiser twice).
std::vector<std::string> load_workload_library(const std::string& path) {
  auto& registry = WorkloadRegistry::instance();
  const auto before = registry.names();
  const bool seen = std::find(installed().libraries.begin(), installed().libraries.end(), path) != installed().libraries.end();
  // A path without a slash would be looked up in the library path, not the working directory.
  const std::string target = path.find('/') == std::string::npos ? "./" + path : path;
  // Registrations note their failures instead of throwing through dlopen (WorkloadRegistration). A
  // refused library stays loaded: the workloads it did register run its code until the process ends.
  void* handle = ::dlopen(target.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (const auto failed = registry.take_failed_registrations(); !failed.empty()) {
    throw UsageError("--workload-lib: " + path + ": " + failed.front());
  }
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw UsageError("--workload-lib: cannot load " + path + ": " + (why ? why : "unknown error"));
  }
  std::vector<std::string> added;
  for (const auto& name : registry.names()) {
    if (std::find(before.begin(), before.end(), name) == before.end()) added.push_back(name);
  }
  if (added.empty() && !seen) {
    throw UsageError("--workload-lib: " + path + " registered no workload (DDPBENCH_REGISTER_WORKLOAD in the library)");
  }
  if (!seen) installed().libraries.push_back(path);
  return added;
}

}  // namespace

namespace {

std::vector<std::string> install(const std::vector<std::string>& libraries, const std::string& model_path,
                                 const std::vector<std::string>& model_settings, bool read_sidecar) {
  std::vector<std::string> added;
  if (const auto failed = WorkloadRegistry::instance().take_failed_registrations(); !failed.empty()) {
    throw std::logic_error("a built-in workload failed to register: " + failed.front());
  }
  for (const auto& lib : libraries) {
    for (auto& name : load_workload_library(lib)) added.push_back(std::move(name));
  }
  if (!model_path.empty()) {
    installed().model = register_scripted_model(model_path, model_settings, read_sidecar);
    added.push_back(installed().model->settings.at("name"));
  } else if (!model_settings.empty()) {
    throw UsageError("--model-set: needs --model PATH");
  }
  return added;
}

}  // namespace

std::vector<std::string> install_workload_sources(const std::vector<std::string>& libraries, const std::string& model_path,
                                                  const std::vector<std::string>& model_settings) {
  return install(libraries, model_path, model_settings, /*read_sidecar=*/true);
}

void install_workload_sources(const WorkloadSources& sources) {
  std::vector<std::string> settings;
  if (sources.model) {
    for (const auto& [key, value] : sources.model->settings) settings.push_back(key + "=" + value);
  }
  install(sources.libraries, sources.model ? sources.model->path : "", settings, /*read_sidecar=*/false);
}

const WorkloadSources& installed_workload_sources() { return installed(); }

std::string WorkloadSources::to_json() const {
  nlohmann::json doc;
  doc["libraries"] = libraries;
  if (model) doc["model"] = {{"path", model->path}, {"settings", model->settings}};
  return doc.dump();
}

WorkloadSources WorkloadSources::from_json(const std::string& text) {
  try {
    const auto doc = nlohmann::json::parse(text);
    WorkloadSources sources;
    sources.libraries = doc.at("libraries").get<std::vector<std::string>>();
    if (doc.contains("model")) {
      sources.model = ModelSource{doc.at("model").at("path").get<std::string>(),
                                  doc.at("model").at("settings").get<std::map<std::string, std::string>>()};
    }
    return sources;
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("malformed ") + kWorkloadSourcesVariable + ": " + e.what());
  }
}

}  // namespace ddpbench
