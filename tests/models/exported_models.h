#pragma once
// Models the C++ tests export from tests/models/factories.py with this leg's own Debian torch,
// through the real scripts/ddpbench-export (test_models.cpp, test_reference_loop.cpp).
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ddpbench::testing {

// The interpreter with the torch that matches this build's LibTorch: Debian's, or DDPBENCH_PYTHON.
inline std::string python() {
  const char* other = std::getenv("DDPBENCH_PYTHON");
  return other != nullptr && *other != '\0' ? other : "/usr/bin/python3";
}

// `factory` (in tests/models/factories.py) exported once per test process with `flags`; the path
// of its .pt (its sidecar beside it).
inline std::string exported_model(const std::string& name, const std::string& factory, const std::vector<std::string>& flags) {
  static ScratchDir dir;
  static std::mutex mutex;
  static std::map<std::string, std::string> done;
  std::lock_guard<std::mutex> lock(mutex);
  if (auto it = done.find(name); it != done.end()) return it->second;
  const std::string path = dir.file(name + ".pt");
  std::vector<std::string> args = {python(), std::string(DDPBENCH_SOURCE_DIR) + "/scripts/ddpbench-export",
                                   "factories:" + factory, "-o", path};
  args.insert(args.end(), flags.begin(), flags.end());
  const auto r = run_process(args, 0, {{"PYTHONPATH", std::string(DDPBENCH_SOURCE_DIR) + "/tests/models"}});
  if (r.exit_code != 0) throw std::runtime_error("ddpbench-export " + factory + " failed: " + r.err + r.out);
  done[name] = path;
  return path;
}

// One sample of 8 floats, 4 classes, batch 8, lr 0.1: the export flags of the small shapes in
// factories.py (named for them: unity builds put several test files in one translation unit).
inline const std::vector<std::string> kSmallShapeFlags = {"--input", "float:8", "--classes", "4", "--batch", "8", "--lr", "0.1"};

// `flags` and `more`.
inline std::vector<std::string> flags_with(std::vector<std::string> flags, const std::vector<std::string>& more) {
  flags.insert(flags.end(), more.begin(), more.end());
  return flags;
}

}  // namespace ddpbench::testing
