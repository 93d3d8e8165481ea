// ddpbench's entry point: the only place that turns outcomes into exit codes.
//   0  every case ran or was skipped with a reason
//   1  a case failed or ran out of memory, or an unexpected error
//   2  bad input (flag, value, combination or path): one line on stderr, nothing written
//   130 interrupted (SIGINT/SIGTERM): measured repetitions are kept in the JSON
#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "harness/atomic_file.h"
#include "harness/cli.h"
#include "harness/errors.h"
#include "harness/json_report.h"
#include "harness/progress.h"
#include "harness/run_context.h"
#include "harness/runner.h"
#include "harness/table_report.h"
#include "harness/trace.h"

namespace {

void on_stop_signal(int signal) {
  ddpbench::Runner::request_stop();
  std::signal(signal, SIG_DFL);  // a second Ctrl-C ends the process at once
}

std::string describe(const ddpbench::DeviceSet& devices) {
  const std::string kind = devices.is_cuda() ? "CUDA device(s)" : "CPU virtual device(s)";
  return std::to_string(devices.size()) + " " + kind + ", " + std::to_string(devices.threads_per_device()) +
         " intra-op thread(s) each";
}

int run(const std::vector<std::string>& args) {
  using namespace ddpbench;
  const CommandLine cmd = parse_command_line(args);
  switch (cmd.action) {
    case CommandLine::Action::Help:
    case CommandLine::Action::Version:
    case CommandLine::Action::List:
      std::cout << cmd.text;
      return 0;
    case CommandLine::Action::Run:
      break;
  }

  const DeviceSet devices = resolve_devices(cmd.devices);
  if (cmd.runner.loader.pin_memory && !devices.is_cuda()) {
    throw UsageError("--pin-memory: needs --device cuda (pinned host memory only speeds host-to-GPU copies)");
  }
  if (cmd.json_path) check_writable_output("--json", *cmd.json_path);
  std::optional<TraceRecorder> trace;
  RunnerOptions options = cmd.runner;
  if (cmd.trace_dir) {
    check_writable_output("--trace", *cmd.trace_dir + "/ddpbench-rank0.json");
    trace.emplace(/*rank=*/0, /*world_size=*/1);
    options.trace = &*trace;
  }

  Runner runner(options, devices, collect_run_context(args));
  runner.validate();

  std::cout << "ddpbench: " << cmd.runner.workloads.size() << " workload(s) x " << cmd.runner.strategies.size()
            << " strategy(ies) on " << describe(devices) << "; " << cmd.runner.repetitions << " repetition(s) of "
            << cmd.runner.steps << " steps after " << cmd.runner.warmup << " warm-up\n"
            << std::flush;

  ProgressSink progress(2);
  TableSink table(std::cout);
  std::optional<JsonFileSink> json;
  runner.add_sink(&progress);
  if (cmd.json_path) {
    json.emplace(*cmd.json_path);
    runner.add_sink(&*json);
  }
  runner.add_sink(&table);

  // A step that never finishes (a deadlock, a lost peer) ends the run within --timeout: the case is
  // marked failed, what was measured is in the JSON, and the process exits 1.
  runner.set_hang_handler([&](const RunRecord& record) {
    std::string what = record.interruption;
    for (const auto& c : record.cases) {
      if (c.status == CaseStatus::Failed && c.reason.rfind("timed out", 0) == 0) what = c.spec.name() + ": " + c.reason;
    }
    std::fprintf(stderr, "ddpbench: error: %s%s\n", what.c_str(),
                 cmd.json_path ? ("; results so far in " + *cmd.json_path).c_str() : "");
    std::fflush(stdout);
    std::_Exit(1);
  });
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  const RunRecord record = runner.run();
  if (cmd.json_path) std::cout << "results: " << *cmd.json_path << '\n';
  if (trace) std::cout << "trace: " << trace->write(*cmd.trace_dir) << '\n';

  if (!record.interruption.empty()) return 130;
  for (const auto& c : record.cases) {
    if (c.status == CaseStatus::Failed || c.status == CaseStatus::Oom) return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string> args(argv, argv + argc);
  try {
    return run(args);
  } catch (const ddpbench::UsageError& e) {
    std::fprintf(stderr, "ddpbench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::fprintf(stderr, "ddpbench: error: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  }
}
