#pragma once
// Helpers shared by the test files: run the real ddpbench binary, make scratch directories.
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "strategies/strategy.h"
#include "workloads/workload.h"

namespace ddpbench::testing {

struct ProcessResult {
  int exit_code = -1;    // -1 when killed by a signal
  int signal = 0;
  std::string out;
  std::string err;
  double seconds = 0;  // from start to reaped: how long the run took
  double seconds_after_signal = 0;  // from the kill_after_ms signal to reaped: how promptly it ended
};

inline std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Files and directories through POSIX calls, never std::filesystem: the PyTorch wheel's libtorch.so
// exports its own copies of std::filesystem's functions, a program linked against it binds to those
// (PyTorch issue #133437), and std::filesystem::remove_all jumped to address 0 there. The CTest
// StdBindings.NoStdSymbolBoundToLibTorch checks that no binary of ours binds such a symbol there.
inline bool path_exists(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0;
}

inline bool is_regular_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The names in `dir`, without "." and ".."; empty when it cannot be read.
inline std::vector<std::string> directory_entries(const std::string& dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return names;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(d);
  return names;
}

// Removes `path` and everything under it, not following symbolic links; quiet when it is gone.
inline void remove_tree(const std::string& path) {
  const auto remove_entry = [](const char* entry, const struct stat*, int, FTW*) {
    ::remove(entry);  // what cannot be removed stays; the walk goes on
    return 0;
  };
  ::nftw(path.c_str(), remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

inline std::string temp_directory() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
}

// A fresh empty directory under the system temp dir, removed with the object.
class ScratchDir {
 public:
  ScratchDir() {
    std::string pattern = temp_directory() + "/ddpbench-test-XXXXXX";
    const char* made = ::mkdtemp(pattern.data());
    if (made == nullptr) throw std::runtime_error("mkdtemp " + pattern + ": " + std::strerror(errno));
    path_ = made;
  }
  ~ScratchDir() { remove_tree(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// execv's argument vector over `args` (which must outlive it; execv does not write to it).
inline std::vector<char*> argv_of(const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  return argv;
}

// Wall-clock bounds the product promises (a signal ends a run within 2 s) are for its own build.
// Under AddressSanitizer every allocation and memory access costs more (a gpt2 case took 1.3-1.8x
// as long on this 2-core VM, and CI's load adds to it), so a sanitized test build allows this much
// longer; the product's build is held to the bound.
#if defined(__SANITIZE_ADDRESS__)
constexpr double kBuildSlowdown = 3.0;
#else
constexpr double kBuildSlowdown = 1.0;
#endif
// How soon after SIGINT, SIGTERM or SIGHUP a run (a launcher and all its ranks) has ended.
constexpr double kSecondsASignalEndsARunWithin = 2.0 * kBuildSlowdown;

// A run's first line ("ddpbench: 1 workload(s) x 2 strategy(ies) on ..."): printed once its outputs
// are claimed and a signal stops it keeping what it measured. Signals meant for a phase of a run
// are counted from it (run_process's counted_from_output).
constexpr const char* kRunHasBegun = " workload(s) x ";

// fork+exec of `args` (no shell); stdout and stderr go to files in `scratch`, read back at the end.
// If kill_after_ms > 0 the child is sent `kill_signal` after that long (if still running); with
// `counted_from_output`, that long after its stdout or stderr first holds that text, so the signal
// lands in the phase the text announces however slowly a loaded machine (or a sanitized build)
// gets there; with `counted_from_ready`, that long after it first returns true (a phase that prints
// nothing: a port the child listens on). `env` is set in the child only.
inline ProcessResult run_process(const std::vector<std::string>& args, int kill_after_ms = 0,
                                 const std::vector<std::pair<std::string, std::string>>& env = {},
                                 int kill_signal = SIGKILL, const std::string& counted_from_output = "",
                                 const std::function<bool()>& counted_from_ready = nullptr) {
  ScratchDir scratch;
  const std::string out_path = scratch.file("stdout"), err_path = scratch.file("stderr");
  // Everything the child needs is built before fork: the tests run processes from several threads.
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry = *e;
    bool overridden = false;
    for (const auto& [name, value] : env) overridden = overridden || entry.rfind(name + "=", 0) == 0;
    if (!overridden) env_strings.push_back(entry);
  }
  for (const auto& [name, value] : env) env_strings.push_back(name + "=" + value);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::vector<char*> argv = argv_of(args);
  const auto started = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    // A test binary that is killed (a timeout) takes its ddpbench with it rather than leaving it to
    // burn a core under the next run.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    const int out = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int err = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(out, 1);
    ::dup2(err, 2);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ProcessResult r;
  int status = 0;
  if (kill_after_ms > 0) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_after_ms);
    bool counting = counted_from_output.empty() && !counted_from_ready;
    while (::waitpid(pid, &status, WNOHANG) == 0) {
      if (!counting) {  // read the output as it grows until the text shows; the clock starts then
        const bool never_shows = std::chrono::steady_clock::now() - started > std::chrono::minutes(5);
        const bool shows = counted_from_ready
                               ? counted_from_ready()
                               : (read_text(out_path) + read_text(err_path)).find(counted_from_output) != std::string::npos;
        if (never_shows || shows) {
          counting = true;
          deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kill_after_ms);
        } else {
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          continue;
        }
      }
      if (std::chrono::steady_clock::now() >= deadline) {
        ::kill(pid, kill_signal);
        ::waitpid(pid, &status, 0);
        r.seconds_after_signal = std::chrono::duration<double>(std::chrono::steady_clock::now() - deadline).count();
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  } else {
    ::waitpid(pid, &status, 0);
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_text(out_path);
  r.err = read_text(err_path);
  return r;
}

// fork+exec of `args` (no shell) in the background, stdout to /dev/null, stderr inherited: the
// caller signals and reaps the returned pid.
inline pid_t start_process(const std::vector<std::string>& args) {
  const std::vector<char*> argv = argv_of(args);
  const pid_t pid = ::fork();
  if (pid == 0) {
    const int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 1);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

// Processes whose environment carries `marker` (NAME=VALUE): what a run left behind.
inline std::vector<int> processes_with(const std::string& marker) {
  std::vector<int> found;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return found;
  while (dirent* e = readdir(proc)) {
    const int pid = std::atoi(e->d_name);
    if (pid <= 0 || pid == getpid()) continue;
    std::ifstream in(std::string("/proc/") + e->d_name + "/environ", std::ios::binary);
    std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(marker) != std::string::npos) found.push_back(pid);
  }
  closedir(proc);
  return found;
}

// A NAME=VALUE no other process has, to find a run's processes by.
inline std::pair<std::string, std::string> unique_marker() {
  return {"DDPBENCH_TEST_MARKER", std::to_string(getpid()) + "-" +
                                      std::to_string(std::chrono::steady_clock::now().time_since_epoch().count())};
}
inline std::string marker_text(const std::pair<std::string, std::string>& marker) {
  return marker.first + "=" + marker.second;
}

// The workloads the suites run under every strategy: all but gpt2, whose 124M parameters take
// seconds a step on a CPU core. gpt2 has tests of its own (test_workloads.cpp, and
// Gpt2.UnderEveryStrategyMatchesSingle at 8 tokens a sample).
inline std::vector<std::string> suite_workloads() {
  std::vector<std::string> out;
  for (const auto& w : ::ddpbench::WorkloadRegistry::instance().names()) {
    if (w != "gpt2") out.push_back(w);
  }
  return out;
}

// A case of a strategy that splits the model itself (pp between its chain units, tp inside its
// linear layers) on a model that offers no such split (a TorchScript file whose forward does more
// than call its submodules in turn; a model with no tensor-parallel plan): whether it was skipped,
// after checking that it says so (the strategy's words, then the model's own reason). False for a
// case of any other strategy, or one that ran; the caller checks those as usual.
inline bool skipped_as_unsplittable(const nlohmann::json& ddpbench_case) {
  const auto strategy = ddpbench_case.at("strategy").get<std::string>();
  const auto& info = ::ddpbench::StrategyRegistry::instance().get(strategy);
  const char* words = info.needs_chain                  ? "pp cuts the model between its units, and "
                      : info.needs_tensor_parallel_plan ? "tp splits linear layers by columns and rows, and "
                                                        : nullptr;
  if (words == nullptr || ddpbench_case.at("status") != "skipped") return false;
  const auto reason = ddpbench_case.at("reason").get<std::string>();
  if (reason.rfind(words, 0) != 0) {
    ADD_FAILURE() << strategy << " skipped a case for another reason than a model it cannot split: " << reason;
  }
  return true;
}

// suite_workloads() as a --workload value.
inline std::string suite_workload_list() {
  std::string out;
  for (const auto& w : suite_workloads()) out += (out.empty() ? "" : ",") + w;
  return out;
}

// The ddpbench binary built alongside the tests.
// The binary the tests run: this build's, or DDPBENCH_TEST_EXECUTABLE's (another build's, to show
// that a new test fails on the code before a fix).
inline std::string ddpbench_executable() {
  const char* other = std::getenv("DDPBENCH_TEST_EXECUTABLE");
  return other != nullptr && *other != '\0' ? other : DDPBENCH_EXECUTABLE;
}

inline std::vector<std::string> ddpbench_args(std::vector<std::string> extra) {
  extra.insert(extra.begin(), ddpbench_executable());
  return extra;
}

// ddpbench with `defaults` (each dropped where `extra` names the flag), then `extra`, writing its
// JSON to `json_path` (--no-json when empty). One intra-op thread per device unless the test names
// --threads: by default ddpbench gives each device cores / world size threads, so on a 16-core
// machine `ctest -j16` would start 16 runs of 16 threads each, and timings that hold on 2 cores
// would not; with one thread the tests load any machine as they load the 2-core one.
inline std::vector<std::string> ddpbench_run(const std::vector<std::pair<std::string, std::string>>& defaults,
                                             const std::string& json_path, std::vector<std::string> extra) {
  std::vector<std::string> args;
  bool threads_named = std::find(extra.begin(), extra.end(), "--threads") != extra.end();
  for (const auto& [flag, value] : defaults) {
    threads_named = threads_named || flag == "--threads";
    if (std::find(extra.begin(), extra.end(), flag) != extra.end()) continue;
    args.insert(args.end(), {flag, value});
  }
  if (!threads_named) args.insert(args.end(), {"--threads", "1"});
  if (json_path.empty()) {
    args.push_back("--no-json");
  } else {
    args.insert(args.end(), {"--json", json_path});
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return ddpbench_args(args);
}

// A parameterised test's name from the words of its parameter, as GoogleTest accepts them (letters,
// digits, '_'): {"--steps", "0"} -> "steps_0", {"--max-cv", "-0.1"} -> "max_cv_minus0_1",
// {"--steps", " 3"} -> "steps_blank3", {"--trace", ""} -> "trace_empty". So a failure in CI says
// which case failed (`Cli/BadInputTest.ExitsTwo.../steps_0`), not the parameter's bytes.
inline std::string test_name_from(const std::vector<std::string>& words) {
  std::string name;
  for (const auto& word : words) {
    std::string w = word.rfind("--", 0) == 0 ? word.substr(2) : word;
    if (w.empty()) w = "empty";
    std::string part;
    for (size_t i = 0; i < w.size(); ++i) {
      const char c = w[i];
      if (std::isalnum(static_cast<unsigned char>(c))) {
        part += c;
      } else if (c == '-' && i == 0) {
        part += "minus";
      } else if (c == ' ') {
        part += "blank";
      } else {
        part += '_';
      }
    }
    name += (name.empty() ? "" : "_") + part;
  }
  std::string collapsed;  // no "__", no '_' at either end
  for (char c : name) {
    if (c == '_' && (collapsed.empty() || collapsed.back() == '_')) continue;
    collapsed += c;
  }
  while (!collapsed.empty() && collapsed.back() == '_') collapsed.pop_back();
  return collapsed.empty() ? "none" : collapsed;
}

// ---- runs of the ddpbench executable shared by several test files ----------------------------

// A run small enough for a test: two steps, two repetitions, tiny batches. A flag in `extra` that is
// also a default here replaces the default (a flag given twice is an error of its own).
inline std::vector<std::string> tiny_run(const std::string& json_path, std::vector<std::string> extra = {}) {
  std::vector<std::pair<std::string, std::string>> flags = {
      {"--device", "cpu"}, {"--steps", "2"}, {"--warmup", "1"}, {"--repetitions", "2"},
      {"--batch", "8"},    {"--dataset-size", "16"}, {"--json", json_path}, {"--threads", "1"}};
  std::vector<std::string> args;
  for (const auto& [flag, value] : flags) {
    if (std::find(extra.begin(), extra.end(), flag) != extra.end()) continue;
    args.push_back(flag);
    args.push_back(value);
  }
  args.insert(args.end(), extra.begin(), extra.end());
  return ddpbench_args(args);
}

// A run without --repetitions samples adaptively: it is what `ddpbench --strategy all` does.
inline std::vector<std::string> adaptive_run(const std::string& json_path, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--device", "cpu", "--threads", "1", "--steps", "2", "--warmup", "1",
                                   "--batch", "8", "--dataset-size", "16", "--json", json_path};
  if (std::find(extra.begin(), extra.end(), "--strategy") == extra.end()) args.insert(args.end(), {"--strategy", "single"});
  args.insert(args.end(), extra.begin(), extra.end());
  return ddpbench_args(args);
}

inline const nlohmann::json& median_entry(const nlohmann::json& doc, const std::string& name) {
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_name"] == name && b.value("aggregate_name", "") == "median") return b;
  }
  throw std::runtime_error("no median entry for " + name);
}

// Runs ddpbench with `args_for(a results path)`; the process's result and the JSON it wrote (null
// when it wrote none).
inline std::pair<ProcessResult, nlohmann::json> run_with_json(
    const std::function<std::vector<std::string>(const std::string&)>& args_for) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  auto r = run_process(args_for(path));
  return {r, path_exists(path) ? nlohmann::json::parse(read_text(path)) : nlohmann::json()};
}

// A run in the background, long enough to be signalled or contended while it writes `path`.
inline pid_t start_long_run(const std::string& path) {
  return start_process(ddpbench_args({"--device", "cpu", "--threads", "1", "--strategy", "single",
                                               "--workload", "mlp", "--steps", "20", "--repetitions", "100",
                                               "--batch", "16", "--json", path}));
}

// The benchmark entry of case `name` in a results document: its first iteration (or its error
// entry), or the first aggregate when `run_type` is "aggregate".
inline const nlohmann::json* find_case(const nlohmann::json& doc, const std::string& name,
                                       const std::string& run_type = "iteration") {
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_name"] == name && (b["run_type"] == run_type || b.contains("error_occurred"))) return &b;
  }
  return nullptr;
}

// The events of a --trace file: complete events ("ph": "X") as they are, and each async begin/end
// pair ("b"/"e", same id) as one event with its "dur" and "async": true; and its rows' names (tid ->
// thread_name).
struct TraceFile {
  nlohmann::json doc;
  std::vector<nlohmann::json> events;
  std::map<int, std::string> row_names;
  // The events named `name` of case `case_name`, in file order.
  std::vector<nlohmann::json> events_of(const std::string& case_name, const std::string& name) const {
    std::vector<nlohmann::json> out;
    for (const auto& e : events) {
      if (e["args"]["case"] == case_name && e["name"] == name) out.push_back(e);
    }
    return out;
  }
};
inline TraceFile read_trace_text(const std::string& text) {
  TraceFile t;
  t.doc = nlohmann::json::parse(text);
  std::map<int, nlohmann::json> begun;  // async id -> its begin event
  for (const auto& e : t.doc["traceEvents"]) {
    if (e["ph"] == "X") t.events.push_back(e);
    if (e["ph"] == "b") begun[e["id"].get<int>()] = e;
    if (e["ph"] == "e" && begun.count(e["id"].get<int>())) {
      auto range = begun[e["id"].get<int>()];
      range["dur"] = e["ts"].get<long>() - range["ts"].get<long>();
      range["async"] = true;
      t.events.push_back(range);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") t.row_names[e["tid"].get<int>()] = e["args"]["name"];
  }
  return t;
}
inline TraceFile read_trace(const std::string& path) { return read_trace_text(read_text(path)); }
// Event `inner` lies within event `outer` (1 µs of slack for the rounding to whole microseconds).
inline bool within(const nlohmann::json& inner, const nlohmann::json& outer) {
  const auto start = inner["ts"].get<long>(), end = start + inner["dur"].get<long>();
  return outer["ts"].get<long>() <= start && end <= outer["ts"].get<long>() + outer["dur"].get<long>() + 1;
}

}  // namespace ddpbench::testing
