#pragma once
// The `ddpbench` command line. Parsing and validation only: nothing runs and nothing is written
// here; every bad flag or value is a UsageError naming it.
#include <optional>
#include <string>
#include <vector>

#include "devices/device_set.h"
#include "run/run_options.h"

namespace ddpbench {

// Sampling when the command line says nothing of it: adaptive, each case until the 95% interval of
// its lower-quartile step is within +-3% (chosen from this project's measurements; docs/ci.md), after at
// least 3 repetitions and 1 s of measured steps, for at most 10 s (with eight strategies, 20 s a
// case made the default run take 181 s; a case that runs out is marked unresolved with the
// precision it reached). --repetitions alone: exactly that many, 5 under torchrun/Slurm (whose
// ranks could not agree on when to stop).
constexpr double kDefaultTargetPrecision = 0.03;
constexpr int kDefaultMinRepetitions = 3;
constexpr double kDefaultMinTimeSeconds = 1;
constexpr double kDefaultMaxTimeSeconds = 10;
constexpr int kDefaultRepetitions = 5;
// --timeout's largest value (11.6 days): every deadline c10d and Gloo derive from it stays in range.
constexpr double kMaxTimeoutSeconds = 1e6;

struct CommandLine {
  enum class Action { Run, List, Help, Version };
  Action action = Action::Run;
  std::string text;  // what to print for Help and Version
  RunnerOptions runner;
  DeviceRequest devices;
  std::optional<std::string> json_path;  // none: --no-json
  std::optional<std::string> trace_dir;  // --trace DIR
  bool sampling_given = false;  // --target-precision, --min-time or --max-time on the command line
};

// `args` includes the program name. Throws UsageError.
CommandLine parse_command_line(const std::vector<std::string>& args);

// The arguments that make a rank process run `strategies` on `workloads` with exactly these
// options, on `devices`, after loading the models and plug-in libraries this process loaded:
// {kRankOptionsFlag, the record of cli/options_codec.h}. ddpbench's launcher passes them to the
// ranks it starts; parse_command_line takes them back whole, and takes nothing else with them.
constexpr const char* kRankOptionsFlag = "--rank-options";
std::vector<std::string> rank_command_line(const RunnerOptions& options, const DeviceSet& devices,
                                           const std::vector<std::string>& workloads,
                                           const std::vector<std::string>& strategies);

// Every strategy and workload, one line each.
std::string list_text();

// Splits "a,b" into names, expanding `all` to every registered name; throws UsageError naming flag.
std::vector<std::string> expand_names(const std::string& flag, const std::string& value,
                                      const std::vector<std::string>& known);

// Parses a whole number in [min, max] or throws UsageError naming flag and value.
long long parse_count(const std::string& flag, const std::string& value, long long min,
                      long long max = (1LL << 53));

}  // namespace ddpbench
