// ddpbench's entry point: the only place that turns outcomes into exit codes.
//   0  every case ran or was skipped with a reason
//   1  a case failed or ran out of memory, or an unexpected error
//   2  bad input (flag, value, combination or path): one line on stderr, nothing written
//   130 interrupted (SIGINT/SIGTERM/SIGHUP): measured repetitions are kept in the JSON
#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "base/fork_server.h"
#include "base/errors.h"
#include "views/json_report.h"
#include "cli/output_paths.h"
#include "models/workload_sources.h"
#include "distributed/process_group.h"
#include "views/progress.h"
#include "distributed/rank_env.h"
#include "distributed/rank_launcher.h"
#include "records/run_context.h"
#include "run/runner.h"
#include "run/stop_request.h"
#include "views/table_report.h"
#include "compat/torch_compat.h"
#include "timing/trace.h"
#include "strategies/hogwild_processes.h"

namespace {

void on_stop_signal(int signal) {
  ddpbench::request_stop();
  std::signal(signal, SIG_DFL);  // a second Ctrl-C ends the process at once
}

// The signals that ask a run to stop and keep what it measured: Ctrl-C, kill, and a closed
// terminal or ssh session (SIGHUP, whose default would end the process and lose the run).
void on_stop_signals(void (*handler)(int)) {
  for (int signal : {SIGINT, SIGTERM, SIGHUP}) std::signal(signal, handler);
}

// The one line for a --json the run could not write; the table above it holds what was measured.
int json_write_failed(const ddpbench::JsonFileSink& json) {
  std::fprintf(stderr, "ddpbench: error: --json: %s; the table above holds what was measured\n", json.failure()->c_str());
  return 1;
}

// The trace files, or none after saying in one line which could not be written (the measurements
// are in the table and the JSON already).
std::vector<std::string> write_trace(const ddpbench::TraceRecorder& trace, const std::string& dir) {
  try {
    return trace.write(dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "ddpbench: error: --trace: %s; the table above holds what was measured\n", e.what());
    return {};
  }
}

// While a rank waits for the others to join, nothing is measured and c10d's rendezvous blocks
// until --timeout: a signal ends the process at once (async-signal-safe calls only).
void on_signal_while_joining(int) {
  static const char message[] =
      "ddpbench: interrupted while waiting for the other ranks to join; nothing was measured\n";
  if (::write(STDERR_FILENO, message, sizeof(message) - 1) < 0) {
    // nothing more can be said
  }
  ::_exit(130);
}

std::string describe(const ddpbench::DeviceSet& devices) {
  const std::string kind = devices.is_cuda() ? "CUDA device(s)" : "CPU virtual device(s)";
  return std::to_string(devices.size()) + " " + kind + ", " + std::to_string(devices.threads_per_device()) +
         " intra-op thread(s) each";
}

// "5 repetition(s) of 30 steps after 5 warm-up", or what adaptive sampling will do.
std::string describe_sampling(const ddpbench::RunnerOptions& r) {
  std::ostringstream out;
  if (r.target_precision > 0) {
    out << "repetitions of " << r.steps << " steps after " << r.warmup
        << " warm-up until each case's lower-quartile step is "
        << "within +-" << r.target_precision * 100 << "% (at least " << r.repetitions << " and " << r.min_time_seconds
        << " s measured, at most " << r.max_time_seconds << " s a case)";
  } else {
    out << r.repetitions << " repetition(s) of " << r.steps << " steps after " << r.warmup << " warm-up";
  }
  return out.str();
}

// The files the run reads, which no output of it may replace: --model's file and sidecar, the
// plug-in libraries. (`--json resnet50.json` beside resnet50.pt would replace the sidecar.)
void protect_inputs(ddpbench::OutputClaims& outputs) {
  const auto& sources = ddpbench::installed_workload_sources();
  if (sources.model) {
    outputs.protect_input("--model", sources.model->path);
    outputs.protect_input("--model", ddpbench::sidecar_path(sources.model->path));
  }
  for (const auto& lib : sources.libraries) outputs.protect_input("--workload-lib", lib);
}

std::string join(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ",") + n;
  return out;
}

// More intra-op threads than cores is allowed (someone may want to see what it costs) but never
// silent: the threads take turns, and every step is slower than the cores would allow.
void warn_if_oversubscribed(const ddpbench::CommandLine& cmd, const ddpbench::DeviceSet& devices) {
  if (cmd.devices.threads == 0 || devices.is_cuda()) return;
  const int cores = ddpbench::available_cpus();
  const int threads = devices.threads_per_device() * devices.size();
  if (threads <= cores) return;
  std::fprintf(stderr,
               "ddpbench: warning: --threads %d on each of %d device(s) is %d threads on %d core(s): they will take "
               "turns, and steps will be slower than the cores allow\n",
               devices.threads_per_device(), devices.size(), threads, cores);
}

// One line on stderr per case that failed or ran out of memory; the exit code of the run.
int report_failures(const ddpbench::RunRecord& record, const std::string& who) {
  int code = 0;
  for (const auto& c : record.cases) {
    if (c.status == ddpbench::CaseStatus::Failed || c.status == ddpbench::CaseStatus::Oom) {
      std::fprintf(stderr, "ddpbench: error: %s%s %s: %s\n", who.c_str(), c.spec.name().c_str(), to_string(c.status),
                   c.reason.c_str());
      code = 1;
    }
  }
  return code;
}

std::string self_executable() {
  char path[4096] = {};
  const ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) throw std::runtime_error("cannot find this executable (/proc/self/exe) to start ranks");
  return std::string(path, static_cast<size_t>(n));
}

// A rank process: started by ddpbench's launcher (one task, result through the store) or by
// torchrun/Slurm (the whole run; rank 0 prints the table and writes the JSON).
int run_as_rank(const ddpbench::CommandLine& cmd, const ddpbench::RankEnv& env, const std::vector<std::string>& args) {
  using namespace ddpbench;
  if (env.launcher_pid != 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);          // never outlive ddpbench's launcher
    if (getppid() != env.launcher_pid) return 1;  // it is gone already
  }
  if (cmd.devices.world_size != 0 && cmd.devices.world_size != env.world_size) {
    throw UsageError("--world-size " + std::to_string(cmd.devices.world_size) + " disagrees with the launcher's world size " +
                     std::to_string(env.world_size));
  }
  const char* task_text = std::getenv("DDPBENCH_RANK_TASK");
  if (task_text == nullptr && cmd.sampling_given) {
    throw UsageError("--target-precision: ranks that torchrun or Slurm start each time their own steps and could "
                     "not agree on when to stop; give --repetitions");
  }
  DeviceRequest request = cmd.devices;
  request.world_size = 0;
  DeviceSet resolved = resolve_devices(request);
  const int threads = cmd.devices.threads > 0 ? cmd.devices.threads : std::max(1, available_cpus() / env.local_world_size);
  const DeviceSet devices(resolved.kind(), env.world_size, threads);
  pin_to_core_slice(env.local_rank, env.local_world_size, threads);

  const auto timeout = std::chrono::milliseconds(static_cast<long long>(cmd.runner.timeout_seconds * 1000));
  std::unique_ptr<ProcessGroupContext> group;
  auto report = [&](RankFailureReport::Kind kind, const std::string& reason) {
    if (!group || task_text == nullptr) return;
    try {
      const std::string text = encode_failure({kind, reason.substr(0, reason.find('\n'))});
      group->store().set(task_keys::error(env.rank), std::vector<uint8_t>(text.begin(), text.end()));
    } catch (const std::exception&) {
      // the launcher's store is gone too: the exit code is all that is left
    }
  };

  // A torchrun/Slurm rank claims what it will write itself, before joining: rank 0 the JSON and the
  // checkpoint, every rank its trace file. A rank started by ddpbench's launcher claims nothing:
  // the launching process holds those claims for the whole run.
  OutputClaims outputs;
  protect_inputs(outputs);
  if (task_text == nullptr) {
    if (env.rank == 0 && cmd.json_path) outputs.claim("--json", *cmd.json_path);
    if (cmd.trace_dir) {
      make_output_directory("--trace", *cmd.trace_dir);
      outputs.claim("--trace", *cmd.trace_dir + "/" + TraceRecorder::file_name(env.rank));
    }
    if (env.rank == 0 && !cmd.runner.strategy.ddp.checkpoint_path.empty()) {
      outputs.claim("--checkpoint", cmd.runner.strategy.ddp.checkpoint_path);
    }
  }
  if (task_text == nullptr) {  // ddpbench's own launcher ends its ranks itself
    on_stop_signals(on_signal_while_joining);
  }
  // A rendezvous that never answers is bad input as an unreachable one is: one line, exit 2.
  group = ProcessGroupContext::join(env, devices.kind(), timeout, [](const std::string& line) {
    std::fprintf(stderr, "ddpbench: %s\n", line.c_str());
    std::_Exit(2);
  });
  RunnerOptions options = cmd.runner;
  if (task_text == nullptr && options.target_precision > 0) {  // torchrun/Slurm: a fixed count (cli.h)
    options.target_precision = options.min_time_seconds = options.max_time_seconds = 0;
    options.repetitions = kDefaultRepetitions;
  }
  std::optional<TraceRecorder> trace;
  if (cmd.trace_dir && task_text == nullptr) {  // torchrun/Slurm ranks: one trace file each
    trace.emplace(env.rank, env.world_size);
    options.trace = &*trace;
  }
  Runner runner(options, devices, collect_run_context(args));
  runner.set_process_group(group.get());
  runner.validate();

  if (task_text != nullptr) {
    try {
      const std::string result = runner.run_rank_task(RankTask::decode(task_text));
      if (env.rank == 0) group->store().set(task_keys::kResult, std::vector<uint8_t>(result.begin(), result.end()));
      return 0;
    } catch (const UsageError& e) {
      report(RankFailureReport::Kind::Usage, e.what());
      throw;
    } catch (const std::exception& e) {
      // After a failed collective, tearing the process group down can block or crash on work
      // still in flight: say why, then leave at once.
      const bool comm = dynamic_cast<const CommFailure*>(&e) != nullptr;
      report(comm ? RankFailureReport::Kind::Comm : RankFailureReport::Kind::Case, e.what());
      const std::string what = e.what();
      std::fprintf(stderr, "ddpbench: error: rank %d: %s\n", env.rank, what.substr(0, what.find('\n')).c_str());
      std::fflush(stdout);
      std::_Exit(1);
    }
  }

  // torchrun / Slurm: the whole run on every rank; rank 0 alone reports.
  std::optional<JsonFileSink> json;
  std::optional<TableSink> table;
  std::optional<ProgressSink> progress;
  if (env.rank == 0) {
    std::cout << "ddpbench: rank 0 of " << env.world_size << " (" << env.launcher << " launch, " << group->backend_name()
              << "), " << threads << " intra-op thread(s) per rank\n"
              << std::flush;
    progress.emplace(2);
    runner.add_sink(&*progress);
    if (cmd.json_path) {
      // Rank 0 alone cannot stop its peers mid-case: a --json it cannot write is said at the end.
      json.emplace(*cmd.json_path);
      runner.add_sink(&*json);
    }
    table.emplace(std::cout);
    runner.add_sink(&*table);
  }
  runner.set_hang_handler([&](const RunRecord&) {
    std::fprintf(stderr, "ddpbench: error: rank %d: no step finished within --timeout\n", env.rank);
    std::_Exit(1);
  });
  runner.set_stuck_stop_handler([](const RunRecord&) {
    std::fflush(stdout);
    std::_Exit(130);
  });
  on_stop_signals(on_stop_signal);
  const RunRecord record = runner.run();
  if (json && json->failure()) return json_write_failed(*json);
  if (env.rank == 0 && cmd.json_path) std::cout << "results: " << *cmd.json_path << '\n';
  if (trace) {
    const std::vector<std::string> written = write_trace(*trace, *cmd.trace_dir);
    if (written.empty()) return 1;
    const std::string& path = written.front();
    if (env.rank == 0) std::cout << "trace: " << path << " (one file per rank)\n";
  }
  if (!record.interruption.empty()) return 130;
  // Every rank says why it failed on its own stderr: the table is rank 0's alone.
  return report_failures(record, "rank " + std::to_string(env.rank) + ": ");
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
  if (const auto env = rank_env_from_environment()) return run_as_rank(cmd, *env, args);

  const DeviceSet devices = resolve_devices(cmd.devices);
  if (cmd.runner.loader.pin_memory && !devices.is_cuda()) {
    throw UsageError("--pin-memory: needs --device cuda (pinned host memory only speeds host-to-GPU copies)");
  }
  // Everything this run will write, claimed before anything is measured: the JSON, one trace file
  // per rank it may run (ddp's ranks send theirs here), the checkpoint.
  // Multi-process strategies run on ranks this process starts and watches, task by task.
  std::vector<std::string> multi_process;
  for (const auto& s : cmd.runner.strategies) {
    if (StrategyRegistry::instance().get(s).multi_process) multi_process.push_back(s);
  }
  std::optional<TraceRecorder> trace;
  RunnerOptions options = cmd.runner;
  if (cmd.trace_dir) {
    trace.emplace(/*rank=*/0, /*world_size=*/1);
    options.trace = &*trace;
  }
  options.strategy.hogwild.worker_executable = self_executable();
  Runner runner(options, devices, collect_run_context(args));
  runner.validate();
  warn_if_oversubscribed(cmd, devices);

  OutputClaims outputs;
  protect_inputs(outputs);
  if (cmd.json_path) outputs.claim("--json", *cmd.json_path);
  if (cmd.trace_dir) {
    make_output_directory("--trace", *cmd.trace_dir);  // last of the checks: nothing made for a refused run
    for (int r = 0; r < (multi_process.empty() ? 1 : devices.size()); ++r) {
      outputs.claim("--trace", *cmd.trace_dir + "/" + TraceRecorder::file_name(r));
    }
  }
  if (const auto& checkpoint = cmd.runner.strategy.ddp.checkpoint_path; !checkpoint.empty()) {
    outputs.claim("--checkpoint", checkpoint);
  }

  std::optional<RankLauncher> launcher;
  if (!multi_process.empty()) {
    RankLaunchOptions launch;
    launch.executable = self_executable();
    launch.args = rank_command_line(cmd.runner, devices, cmd.runner.workloads, multi_process);
    launch.world_size = devices.size();
    launch.timeout = std::chrono::milliseconds(static_cast<long long>(cmd.runner.timeout_seconds * 1000));
    launcher.emplace(launch);
    runner.set_rank_launcher(&*launcher);
  }

  // From the header on, a signal stops the run and keeps what it measured (nothing, this early): the
  // header tells a user, and a test, that a Ctrl-C no longer just kills the process.
  on_stop_signals(on_stop_signal);
  std::cout << "ddpbench: " << cmd.runner.workloads.size() << " workload(s) x " << cmd.runner.strategies.size()
            << " strategy(ies) on " << describe(devices) << "; " << describe_sampling(cmd.runner) << '\n';
  // The memory levers, where pulled (docs/memory.md): every case below ran with them.
  const auto& levers = cmd.runner.strategy.levers;
  if (levers.activation_checkpointing.enabled() || levers.grad_accum > 1) {
    std::cout << "memory levers: activation checkpointing " << levers.activation_checkpointing.to_string();
    if (levers.grad_accum > 1) {
      std::cout << "; " << levers.grad_accum << " micro-batches a step, each 1/" << levers.grad_accum
                << " of the batch, gradients summed before one optimizer step"
                << (levers.sync_every_microbatch ? " (ddp: all-reduced after every micro-batch)" : "")
                << (levers.no_sync_accum ? " (fsdp: unsharded gradients kept until the last, one reduce-scatter)" : "");
    }
    std::cout << '\n';
  }
  std::cout << std::flush;

  ProgressSink progress(2);
  TableSink table(std::cout);
  std::optional<JsonFileSink> json;
  runner.add_sink(&progress);
  if (cmd.json_path) {
    // A --json that cannot be written (a full disk, ulimit -f) stops the run at the next step: what
    // was measured is in the table, the last whole file stays.
    json.emplace(*cmd.json_path, [](const std::string&) { request_stop_because("--json could not be written"); });
    runner.add_sink(&*json);
  }
  runner.add_sink(&table);

  // A step that never finishes (a deadlock, a lost peer) ends the run within --timeout: the case is
  // marked failed, what was measured is in the JSON, and the process exits 1.
  runner.set_hang_handler([&](const RunRecord& record) {
    std::string what = record.interruption;
    for (const auto& c : record.cases) {
      if ((c.status == CaseStatus::Failed || c.status == CaseStatus::Oom) && c.reason.rfind("timed out", 0) == 0) {
        what = c.spec.name() + (c.status == CaseStatus::Oom ? " oom: " : ": ") + c.reason;
      }
    }
    std::fprintf(stderr, "ddpbench: error: %s%s\n", what.c_str(),
                 cmd.json_path ? ("; results so far in " + *cmd.json_path).c_str() : "");
    std::fflush(stdout);
    fork_server::stop();
    std::_Exit(1);
  });
  // A stop the step in progress cannot reach (stuck in a library): the table and the JSON hold what
  // was measured, and the process ends as the stop would have ended it.
  runner.set_stuck_stop_handler([&](const RunRecord&) {
    std::fflush(stdout);
    fork_server::stop();
    std::_Exit(json && json->failure() ? json_write_failed(*json) : 130);
  });
  const RunRecord record = runner.run();
  if (json && json->failure()) return json_write_failed(*json);
  if (cmd.json_path) std::cout << "results: " << *cmd.json_path << '\n';
  if (trace) {
    const std::vector<std::string> written = write_trace(*trace, *cmd.trace_dir);
    if (written.empty()) return 1;
    std::cout << "trace: " << join(written) << '\n';
  }

  if (!record.interruption.empty()) return 130;
  return report_failures(record, "");
}

}  // namespace

namespace {

int run_main(const std::vector<std::string>& args) {
  // A standard descriptor started closed (`>&-`) would be handed to the next file or socket opened,
  // and the table written into a results file or a peer's socket: each is held on /dev/null, and a
  // closed standard output counts as one that could not be written (checked at the end).
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1 && errno == EBADF) {
      if (open("/dev/null", fd == 0 ? O_RDONLY : O_WRONLY) == 1) std::cout.setstate(std::ios::badbit);
    }
  }
  ddpbench::compat::silence_library_logging();  // ddpbench says each error in one line of its own
  // A write to a dead peer's socket (Gloo's writev when a rank was killed) or to a dead worker's
  // pipe must fail with EPIPE, which the caller turns into a case failure naming the peer, not end
  // this process silently with SIGPIPE (Python, where PyTorch usually runs, ignores it at start-up
  // for the same reason). Children get SIGPIPE back at its default (child_process.h).
  std::signal(SIGPIPE, SIG_IGN);
  // Past a file-size limit (ulimit -f) a write must fail with EFBIG, which names the file in one
  // line as a full disk's ENOSPC does, not kill the run with SIGXFSZ and lose what it measured.
  // Rank processes inherit it.
  std::signal(SIGXFSZ, SIG_IGN);
  // A Hogwild worker process started by a run of this executable: it takes no command line.
  if (ddpbench::is_hogwild_worker_process()) return ddpbench::hogwild_worker_main();
  try {
    const int code = run(args);
    // The table (or --help, --list) is the product too: a closed or full standard output must not
    // lose it without a word, nor end with 0 as if it had been written.
    std::cout.flush();
    if (std::cout.fail()) {
      std::fprintf(stderr, "ddpbench: error: standard output could not be written (closed or full): the table is "
                           "lost; the results file (unless --no-json) holds what was measured\n");
      return code == 0 ? 1 : code;
    }
    return code;
  } catch (const ddpbench::UsageError& e) {
    std::fprintf(stderr, "ddpbench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    std::fprintf(stderr, "ddpbench: error: %s\n", what.substr(0, what.find('\n')).c_str());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  // First of all, while this process is one thread with LibTorch loaded and nothing else done: the
  // fork server that starts ranks and workers without loading LibTorch again (base/fork_server.h).
  // In a child it forked, this returns that child's command line, and main goes on as its own.
  std::optional<std::vector<std::string>> forked = ddpbench::fork_server::start();
  const int code = run_main(forked ? *forked : std::vector<std::string>(argv, argv + argc));
  if (forked) {
    // A forked child leaves without LibTorch's static destructors: they free what the server
    // built, and every page they touch is a copy-on-write fault (1 s of a rank's exit on the
    // 2-core VM, against 0.1 s for an exec'd rank). Streams are flushed first.
    std::cout.flush();
    std::fflush(nullptr);
    ::_exit(code);
  }
  ddpbench::fork_server::stop();
  return code;
}
