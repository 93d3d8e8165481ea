#include "cli/cli.h"

#include <CLI/CLI.hpp>

#include <algorithm>
#include <initializer_list>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "base/build_info.h"
#include "base/utf8.h"
#include "devices/counting_allocator.h"
#include "base/errors.h"
#include "cli/options_codec.h"
#include "cli/memory_flags.h"
#include "cli/pipeline_flags.h"
#include "distributed/mesh.h"
#include "distributed/process_group.h"
#include "strategies/strategy.h"
#include "compat/torch_compat.h"
#include "models/workload_sources.h"
#include "workloads/gpt2_size.h"
#include "workloads/workload.h"

namespace ddpbench {

namespace {

// Whether `value` spells a decimal number and nothing else: strtod alone would take leading blanks,
// hexadecimal ("0x10" = 16), "inf" and "nan", and strtoll leading blanks.
bool is_decimal(const std::string& value, bool whole) {
  size_t i = (!value.empty() && (value[0] == '+' || value[0] == '-')) ? 1 : 0;
  auto digits = [&] {
    const size_t start = i;
    while (i < value.size() && std::isdigit(static_cast<unsigned char>(value[i]))) ++i;
    return i - start;
  };
  size_t mantissa = digits();
  if (!whole && i < value.size() && value[i] == '.') {
    ++i;
    mantissa += digits();
  }
  if (mantissa == 0) return false;
  if (!whole && i < value.size() && (value[i] == 'e' || value[i] == 'E')) {
    ++i;
    if (i < value.size() && (value[i] == '+' || value[i] == '-')) ++i;
    if (digits() == 0) return false;
  }
  return i == value.size();
}

}  // namespace

long long parse_count(const std::string& flag, const std::string& value, long long min, long long max) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(value.c_str(), &end, 10);
  if (!is_decimal(value, /*whole=*/true) || end == nullptr || *end != '\0' || errno == ERANGE) {
    throw UsageError(flag + ": '" + value + "' is not a whole number");
  }
  if (v < min) throw UsageError(flag + ": must be at least " + std::to_string(min) + ", got " + value);
  if (v > max) throw UsageError(flag + ": must be at most " + std::to_string(max) + ", got " + value);
  return v;
}

namespace {

// The number `value` spells in full, when it is a finite one; each flag says what else it needs.
std::optional<double> parse_finite(const std::string& value) {
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(value.c_str(), &end);
  if (!is_decimal(value, /*whole=*/false) || *end != '\0' || errno == ERANGE || !std::isfinite(v)) return std::nullopt;
  return v;
}

double parse_seconds(const std::string& flag, const std::string& value) {
  const auto v = parse_finite(value);
  if (!v) throw UsageError(flag + ": '" + value + "' is not a number of seconds");
  if (*v <= 0) throw UsageError(flag + ": must be more than 0 seconds, got " + value);
  return *v;
}

double parse_fraction(const std::string& flag, const std::string& value) {
  const auto v = parse_finite(value);
  if (!v || *v < 0) throw UsageError(flag + ": '" + value + "' is not a non-negative number");
  return *v;
}

// A positive number of `unit`s, or UsageError naming the flag.
double parse_positive(const std::string& flag, const std::string& value, const std::string& unit) {
  const auto v = parse_finite(value);
  if (!v || *v <= 0) throw UsageError(flag + ": '" + value + "' is not a positive number of " + unit);
  return *v;
}

}  // namespace

namespace {

// --repetitions, --target-precision, --min-time and --max-time into the runner's sampling options
// (the defaults in cli.h).
void parse_sampling(const std::optional<std::string>& repetitions, const std::string& target_precision,
                    const std::string& min_time, const std::string& max_time, CommandLine& cmd) {
  auto& r = cmd.runner;
  cmd.sampling_given = !target_precision.empty() || !min_time.empty() || !max_time.empty();
  if (repetitions) r.repetitions = static_cast<int>(parse_count("--repetitions", *repetitions, 1, 10000));
  r.target_precision = !target_precision.empty() ? parse_fraction("--target-precision", target_precision)
                       : repetitions             ? 0
                                                 : kDefaultTargetPrecision;
  if (r.target_precision == 0) {
    if (!min_time.empty() || !max_time.empty()) {
      throw UsageError(std::string(!min_time.empty() ? "--min-time" : "--max-time") +
                       ": applies to adaptive sampling, which --repetitions without --target-precision turns off");
    }
    if (!repetitions) r.repetitions = kDefaultRepetitions;
    return;
  }
  if (r.target_precision >= 1) throw UsageError("--target-precision: " + target_precision + " is +-100% or more");
  if (!repetitions) r.repetitions = kDefaultMinRepetitions;
  if (r.repetitions < 2) throw UsageError("--repetitions: adaptive sampling needs at least 2 (an interval needs two)");
  r.min_time_seconds = min_time.empty() ? kDefaultMinTimeSeconds : parse_fraction("--min-time", min_time);
  r.max_time_seconds = max_time.empty() ? kDefaultMaxTimeSeconds : parse_seconds("--max-time", max_time);
  if (r.max_time_seconds < r.min_time_seconds) {
    std::ostringstream seconds;
    seconds << r.max_time_seconds;
    throw UsageError("--max-time: " + seconds.str() + " s is less than --min-time " + min_time);
  }
}

}  // namespace

std::vector<std::string> expand_names(const std::string& flag, const std::string& value,
                                      const std::vector<std::string>& known) {
  std::vector<std::string> out;
  if (value.empty()) throw UsageError(flag + ": empty list");
  size_t start = 0;
  while (start <= value.size()) {
    const size_t comma = std::min(value.find(',', start), value.size());
    const std::string item = value.substr(start, comma - start);
    start = comma + 1;
    if (item.empty()) throw UsageError(flag + ": empty name in '" + value + "'");
    if (item == "all") {
      for (const auto& k : known) {
        if (std::find(out.begin(), out.end(), k) == out.end()) out.push_back(k);
      }
      continue;
    }
    if (std::find(known.begin(), known.end(), item) == known.end()) {
      std::string list;
      for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
      throw UsageError(flag + ": unknown name '" + item + "' (known: " + list + ", all)");
    }
    if (std::find(out.begin(), out.end(), item) == out.end()) out.push_back(item);
  }
  return out;
}

std::string list_text() {
  std::ostringstream out;
  out << "strategies:\n";
  for (const auto& name : StrategyRegistry::instance().names()) {
    out << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ')
        << StrategyRegistry::instance().get(name).description << '\n';
  }
  out << "workloads:\n";
  for (const auto& name : WorkloadRegistry::instance().names()) {
    out << "  " << name << std::string(name.size() < 18 ? 18 - name.size() : 1, ' ')
        << WorkloadRegistry::instance().get(name).description() << '\n';
  }
  return out.str();
}

// Every argument becomes text in the results (context.argv, the settings, the paths), and JSON holds
// Unicode text only: an argument with bytes that are not UTF-8 (a path in another encoding) is
// refused naming its flag, before anything is measured, rather than failing the JSON at the end.
void refuse_non_utf8_arguments(const std::vector<std::string>& args) {
  for (std::size_t i = 1; i < args.size(); ++i) {
    const auto bad = first_invalid_utf8(args[i]);
    if (!bad) continue;
    const auto is_flag = [](const std::string& a) { return a.size() > 1 && a[0] == '-'; };
    std::string flag = is_flag(args[i])             ? args[i].substr(0, args[i].find('='))
                       : i > 1 && is_flag(args[i - 1]) ? args[i - 1]
                                                     : "argument " + std::to_string(i);
    char byte[8];
    std::snprintf(byte, sizeof(byte), "0x%02X", static_cast<unsigned>(static_cast<unsigned char>(args[i][*bad])));
    throw UsageError(escape_invalid_utf8(flag) + ": '" + escape_invalid_utf8(args[i]) + "' is not UTF-8 text (byte " +
                     byte + " at offset " + std::to_string(*bad) +
                     "); the results are JSON, which holds text only: give it in UTF-8");
  }
}

CommandLine parse_command_line(const std::vector<std::string>& args) {
  CommandLine cmd;
  // A rank started by ddpbench's launcher: the launcher's resolved options, whole (options_codec.h).
  if (args.size() == 3 && args[1] == kRankOptionsFlag) {
    RankOptions rank = decode_rank_options(args[2]);
    install_workload_sources(rank.sources);
    cmd.runner = std::move(rank.runner);
    cmd.devices = rank.devices;
    cmd.json_path.reset();
    return cmd;
  }
  refuse_non_utf8_arguments(args);
  CLI::App app{"ddpbench: one training workload under several parallel-training strategies, measured side by side",
               "ddpbench"};
  app.set_version_flag("--version", std::string("ddpbench ") + build_version() + " (git " + build_git_sha() +
                                        ", LibTorch " + compat::torch_version() +
                                        (compat::built_with_cuda() ? ", CUDA" : ", CPU only") + ")");
  std::string strategies = "all", workloads = "mlp", device = "auto", world_size, batch, steps = "30", warmup = "5",
              repetitions = "5", seed = "42", threads, timeout = "300", json = "ddpbench-results.json",
              loader_workers = "0", dataset_size, parity_steps = "3", parity_tolerance, max_cv = "0.05", slow_by = "0",
              dtype = "fp32";
  bool list = false, no_json = false, pin_memory = false;

  app.add_option("--strategy", strategies, "comma list of strategies, or all")->capture_default_str();
  app.add_option("--workload", workloads, "comma list of workloads, or all (default: mlp, or --model's)");
  std::string model;
  std::vector<std::string> model_settings, workload_libraries;
  app.add_option("--model", model,
                 "a TorchScript file (torch.jit.save) as a workload, trained as its sidecar (the same path ending "
                 ".json; scripts/ddpbench-export writes both) and --model-set say");
  app.add_option("--model-set", model_settings, "KEY=VALUE of --model's spec, over its sidecar's (docs/models.md); repeatable")
      ->allow_extra_args(false);
  app.add_option("--workload-lib", workload_libraries,
                 "a shared library whose DDPBENCH_REGISTER_WORKLOAD lines add workloads (docs/models.md); repeatable")
      ->allow_extra_args(false);
  app.add_option("--device", device, "auto | cpu | cuda (auto: CUDA when present)")->capture_default_str();
  app.add_option("--world-size", world_size, "devices for parallel strategies (default: visible GPUs, or 2 CPU virtual devices)");
  app.add_option("--batch", batch, "global batch over all devices (default: the workload's)");
  std::string seq_len;
  app.add_option("--seq-len", seq_len, "gpt2: tokens per sample, up to 1024 (default: 1024 on CUDA, 32 on CPU)");
  std::string gpt2_size;
  app.add_option("--gpt2-size", gpt2_size,
                 "gpt2: small (124M, default), medium, large, xl, or LAYERS:HEADS:WIDTH[:VOCAB]");
  std::string gpt2_loss;
  app.add_option("--gpt2-loss", gpt2_loss,
                 "gpt2: fused (default: output projection and loss over chunks of tokens, the logits never whole) "
                 "| plain (whole logits, then the loss, as PyTorch's eager loop)");
  app.add_option("--steps", steps, "measured steps per repetition")->capture_default_str();
  app.add_option("--warmup", warmup, "unmeasured steps before each repetition")->capture_default_str();
  app.add_option("--repetitions", repetitions,
                 "repetitions per case, interleaved across cases (default: adaptive, see --target-precision)");
  std::string target_precision, min_time, max_time;
  app.add_option("--target-precision", target_precision,
                 "repeat each case until the 95% interval of its lower-quartile step (over repetitions) is within +-this (default 0.03; 0: "
                 "exactly --repetitions); --repetitions is then the fewest");
  app.add_option("--min-time", min_time, "adaptive sampling: measured seconds a case runs at least (default 1)");
  app.add_option("--max-time", max_time,
                 "adaptive sampling: seconds a case may take before it stops unresolved (default 20)");
  app.add_option("--seed", seed, "seed of the weights, the data and the shuffle")->capture_default_str();
  app.add_option("--threads", threads, "intra-op threads per device/worker (default: cores / world size)");
  app.add_option("--timeout", timeout, "seconds before a stuck rendezvous, collective or step fails the case")
      ->capture_default_str();
  app.add_option("--json", json, "results file, written atomically")->capture_default_str();
  app.add_flag("--no-json", no_json, "write no results file");
  app.add_option("--loader-workers", loader_workers, "threads assembling batches ahead (0: inline)")
      ->capture_default_str();
  app.add_flag("--pin-memory", pin_memory, "assemble batches in pinned host memory (CUDA only)");
  std::string data_path;
  bool data_on_device = false;
  app.add_option("--data-path", data_path,
                 "where batches are placed: host (the strategy copies them in its step), prefetch (on the "
                 "device a step ahead), device (the dataset on the device), auto (default: prefetch on CUDA, "
                 "host on CPU)");
  app.add_flag("--data-on-device", data_on_device, "the dataset on the device: --data-path device");
  app.add_option("--dataset-size", dataset_size, "samples in the synthetic dataset (default: 32 global batches)");
  app.add_option("--parity-steps", parity_steps, "untimed steps of the parity check against single (0: off)")
      ->capture_default_str();
  app.add_option("--parity-tolerance", parity_tolerance,
                 "largest relative parameter difference from single (default: 1e-9 under fp32, whose parity "
                 "check trains in float64; 1e-2 bf16, 1e-3 fp16)");
  std::string peak_tflops;
  app.add_option("--peak-tflops", peak_tflops,
                 "one device's peak TFLOP/s at --dtype, to read achieved TFLOP/s against (default: NVIDIA's "
                 "datasheet for H100/H200/A100; none on CPUs)");
  app.add_option("--dtype", dtype, "fp32, or mixed precision with autocast: bf16 | fp16 (fp16: CUDA only)")
      ->capture_default_str();
  app.add_option("--max-cv", max_cv, "mark a case noisy when its repetitions vary more (0.05 = 5%)")
      ->capture_default_str();
  app.add_option("--slow-by", slow_by,
                 "make every step this fraction slower (0.1 = 10%) by sleeping inside it: to measure what a CI "
                 "gate detects, never in a real measurement")
      ->capture_default_str();
  std::string bucket_mb = "25", checkpoint, checkpoint_every;
  bool no_overlap = false, grad_as_bucket_view = false, sync_bn = false;
  app.add_option("--bucket-mb", bucket_mb, "ddp, zero1, zero2: largest gradient bucket, in MiB")->capture_default_str();
  app.add_flag("--no-overlap", no_overlap,
               "ddp, zero1, zero2, fsdp: all-reduce (reduce-scatter) after backward instead of during it, and fsdp's "
               "all-gathers on the step's thread (the naive baseline)");
  std::string reshard_after_forward;
  bool no_prefetch = false;
  app.add_option("--reshard-after-forward", reshard_after_forward,
                 "fsdp: on (default) frees each unit's gathered parameters after its forward and gathers them again "
                 "for backward (FULL_SHARD); off keeps them until its backward (SHARD_GRAD_OP)");
  app.add_flag("--no-prefetch", no_prefetch, "fsdp: all-gather each unit when it runs, not while the one before it computes");
  std::string mesh;
  app.add_option("--mesh", mesh,
                 "tp, pp: the ranks on a grid of named dimensions, dp=D,tp=T, fsdp=F,tp=T, dp=D,pp=P or fsdp=F,pp=P "
                 "(the product = --world-size): tp over each group of T ranks (pp: a pipeline of P stages), and data "
                 "parallel (dp: the gradients all-reduced; fsdp: the parameters sharded) over the other groups "
                 "(docs/mesh.md)");
  bool sequence_parallel = false;
  app.add_flag("--sequence-parallel", sequence_parallel,
               "tp: each block's all-reduces become a reduce-scatter into shares of the sequence and an all-gather "
               "back, the LayerNorms and residual adds on the rank's share (Megatron's sequence parallelism)");
  app.add_flag("--grad-as-bucket-view", grad_as_bucket_view, "ddp: gradients live in the buckets (no copies)");
  app.add_flag("--sync-bn", sync_bn, "ddp: BatchNorm statistics over the global batch (SyncBatchNorm)");
  app.add_option("--checkpoint", checkpoint, "ddp: rank 0 saves the model here (loadable by torch::load)");
  app.add_option("--checkpoint-every", checkpoint_every, "ddp: save every K steps (default: once per repetition)");
  std::string hogwild_mode = "threads", sync_every, hogwild_workers;
  app.add_option("--hogwild-mode", hogwild_mode, "hogwild: workers as threads of this process, or processes over shared memory")
      ->capture_default_str();
  app.add_option("--sync-every", sync_every,
                 "hogwild: workers train private copies and add their change into the shared parameters every K steps "
                 "(default 1: plain Hogwild)");
  app.add_option("--workers", hogwild_workers,
                 "hogwild: workers over the world size's devices, round-robin (default: one per device; on CUDA all "
                 "share device 0, each on its own stream)");
  PipelineFlags pipeline_flags;
  pipeline_flags.add_to(app);
  MemoryLeverFlags lever_flags;
  lever_flags.add_to(app);
  std::string trace_dir;
  app.add_option("--trace", trace_dir, "write a Chrome trace-event file per rank into this directory");
  app.add_flag("--list", list, "list every strategy and workload, one line each");

  std::vector<std::string> rest(args.begin() + (args.empty() ? 0 : 1), args.end());
  // `--json=` with nothing after '=' would make CLI11 take the next argument as its value
  // (`--json= --no-overlap` wrote a file named --no-overlap): an empty value, refused as below.
  for (const auto& arg : rest) {
    if (arg.size() > 3 && arg.rfind("--", 0) == 0 && arg.find('=') == arg.size() - 1 &&
        app.get_option_no_throw(arg.substr(0, arg.size() - 1)) != nullptr) {
      throw UsageError(arg.substr(0, arg.size() - 1) + ": empty value after '='");
    }
  }
  std::reverse(rest.begin(), rest.end());  // CLI11 takes the arguments in reverse order
  try {
    app.parse(rest);
  } catch (const CLI::CallForHelp&) {
    cmd.action = CommandLine::Action::Help;
    cmd.text = app.help();
    return cmd;
  } catch (const CLI::CallForVersion& e) {
    cmd.action = CommandLine::Action::Version;
    cmd.text = std::string(e.what()) + "\n";
    return cmd;
  } catch (const CLI::ParseError& e) {
    throw UsageError(e.what());
  }
  // An empty value is never "the default": `--trace ""` from an unset shell variable must not
  // quietly mean no trace.
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_type_size() == 0) continue;  // a flag: it takes no value
    for (const auto& value : option->results()) {
      if (value.empty()) throw UsageError(option->get_name() + ": empty value");
    }
  }
  // Models and plug-in libraries first: they add workloads, which --list shows and --workload may name.
  install_workload_sources(workload_libraries, model, model_settings);
  if (list) {
    cmd.action = CommandLine::Action::List;
    cmd.text = list_text();
    return cmd;
  }

  auto& r = cmd.runner;
  r.strategies = expand_names("--strategy", strategies, StrategyRegistry::instance().names());
  if (!model.empty() && app.count("--workload") == 0) workloads = installed_workload_sources().model->settings.at("name");
  r.workloads = expand_names("--workload", workloads, WorkloadRegistry::instance().names());
  cmd.devices.device = device;
  if (device != "auto" && device != "cpu" && device != "cuda") {
    throw UsageError("--device: unknown device '" + device + "' (expected auto, cpu or cuda)");
  }
  nccl_waits_on_the_stream();  // a misspelt DDPBENCH_NCCL_WAIT fails here, before any case runs
  if (!world_size.empty()) {
    cmd.devices.world_size = static_cast<int>(parse_count("--world-size", world_size, 1, CpuMemoryCounter::kMaxWorldSize));
  }
  if (!threads.empty()) cmd.devices.threads = static_cast<int>(parse_count("--threads", threads, 1, 1024));
  if (!batch.empty()) r.global_batch = parse_count("--batch", batch, 1);
  if (!seq_len.empty()) {
    std::int64_t longest = 0;
    for (const auto& w : r.workloads) longest = std::max(longest, WorkloadRegistry::instance().get(w).max_sequence_length());
    if (longest == 0) throw UsageError("--seq-len: none of the workloads run takes a sequence length (gpt2 does)");
    r.sequence_length = parse_count("--seq-len", seq_len, 1, longest);
  }
  if (app.count("--gpt2-size") > 0) {
    if (std::find(r.workloads.begin(), r.workloads.end(), "gpt2") == r.workloads.end()) {
      throw UsageError("--gpt2-size: gpt2 is not among the workloads run");
    }
    try {
      r.gpt2_size = parse_gpt2_size(gpt2_size).name;
    } catch (const std::invalid_argument& e) {
      throw UsageError(std::string("--gpt2-size: ") + e.what());
    }
  }
  if (app.count("--gpt2-loss") > 0) {
    if (std::find(r.workloads.begin(), r.workloads.end(), "gpt2") == r.workloads.end()) {
      throw UsageError("--gpt2-loss: gpt2 is not among the workloads run");
    }
    if (gpt2_loss != "fused" && gpt2_loss != "plain") {
      throw UsageError("--gpt2-loss: unknown loss path '" + gpt2_loss + "' (expected fused or plain)");
    }
    r.gpt2_plain_loss = gpt2_loss == "plain";
  }
  r.steps = static_cast<int>(parse_count("--steps", steps, 1, 1000000));
  r.warmup = static_cast<int>(parse_count("--warmup", warmup, 0, 1000000));
  parse_sampling(app.count("--repetitions") > 0 ? std::optional<std::string>(repetitions) : std::nullopt,
                 target_precision, min_time, max_time, cmd);
  r.seed = static_cast<std::uint64_t>(parse_count("--seed", seed, 0));
  r.timeout_seconds = parse_seconds("--timeout", timeout);
  // Every accepted value is honoured: under a second a rendezvous failed at once, and from 1e10 s
  // the deadlines overflowed (a run failed at once as "timed out"), so both ends are refused.
  if (r.timeout_seconds < 1 || r.timeout_seconds > kMaxTimeoutSeconds) {
    throw UsageError("--timeout: " + timeout + " s is outside 1 to " + std::to_string(static_cast<long long>(kMaxTimeoutSeconds)) +
                     " s");
  }
  r.loader.workers = static_cast<int>(parse_count("--loader-workers", loader_workers, 0, 64));
  r.loader.pin_memory = pin_memory;
  if (data_on_device && !data_path.empty() && data_path != "device") {
    throw UsageError("--data-on-device: contradicts --data-path " + data_path);
  }
  if (!data_path.empty()) r.data_path = parse_data_path("--data-path", data_path);
  if (data_on_device) r.data_path = DataPath::Device;
  if (!dataset_size.empty()) r.dataset_size = parse_count("--dataset-size", dataset_size, 1);
  r.parity_steps = static_cast<int>(parse_count("--parity-steps", parity_steps, 0, 10000));
  r.precision = parse_precision("--dtype", dtype);
  if (!peak_tflops.empty()) r.peak_flops = parse_positive("--peak-tflops", peak_tflops, "TFLOP/s") * 1e12;
  r.parity_tolerance = parity_tolerance.empty() ? default_parity_tolerance(r.precision)
                                                : parse_fraction("--parity-tolerance", parity_tolerance);
  r.max_cv = parse_fraction("--max-cv", max_cv);
  r.slow_by = parse_fraction("--slow-by", slow_by);
  if (r.slow_by > 10) throw UsageError("--slow-by: " + slow_by + " is more than 10 (an elevenfold step)");
  if (!trace_dir.empty()) cmd.trace_dir = trace_dir;

  auto& ddp = r.strategy.ddp;
  ddp.bucket_mb = parse_positive("--bucket-mb", bucket_mb, "MiB");
  ddp.overlap = !no_overlap;
  ddp.grad_as_bucket_view = grad_as_bucket_view;
  ddp.sync_bn = sync_bn;
  ddp.checkpoint_path = checkpoint;
  if (!checkpoint_every.empty()) {
    if (checkpoint.empty()) throw UsageError("--checkpoint-every: needs --checkpoint PATH");
    ddp.checkpoint_every = static_cast<int>(parse_count("--checkpoint-every", checkpoint_every, 1, 1000000));
    if (ddp.checkpoint_every > r.warmup + r.steps) {
      throw UsageError("--checkpoint-every: " + checkpoint_every + " is more than the " +
                       std::to_string(r.warmup + r.steps) + " steps of a repetition (--warmup + --steps): " +
                       "no checkpoint would ever be written");
    }
  }
  auto runs_any_of = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* name) {
      return std::find(r.strategies.begin(), r.strategies.end(), name) != r.strategies.end();
    });
  };
  if (app.count("--bucket-mb") > 0 && !runs_any_of({"ddp", "zero1", "zero2"})) {
    throw UsageError("--bucket-mb: applies to ddp, zero1 and zero2 only, which --strategy does not include");
  }
  if (no_overlap && !runs_any_of({"ddp", "zero1", "zero2", "fsdp"})) {
    throw UsageError("--no-overlap: applies to ddp, zero1, zero2 and fsdp only, which --strategy does not include");
  }
  auto& fsdp = r.strategy.fsdp;
  if (!reshard_after_forward.empty()) {
    if (reshard_after_forward == "on" || reshard_after_forward == "true" || reshard_after_forward == "1") {
      fsdp.reshard_after_forward = true;
    } else if (reshard_after_forward == "off" || reshard_after_forward == "false" || reshard_after_forward == "0") {
      fsdp.reshard_after_forward = false;
    } else {
      throw UsageError("--reshard-after-forward: expected on or off, not '" + reshard_after_forward + "'");
    }
  }
  fsdp.prefetch = !no_prefetch;
  std::optional<Mesh> parsed_mesh;
  if (!mesh.empty()) {
    if (!runs_any_of({"tp", "pp"})) throw UsageError("--mesh: applies to tp and pp only, which --strategy does not include");
    parsed_mesh = Mesh::parse(mesh, mesh_dimension_names(), cmd.devices.world_size);
  }
  const bool fsdp_mesh = parsed_mesh && parsed_mesh->find("fsdp");
  // On fsdp=F,pp=P a stage is one unit gathered for the whole step: neither flag shapes it.
  const bool fsdp_tp_mesh = fsdp_mesh && parsed_mesh->find("tp");
  for (const auto& [flag, given] : std::vector<std::pair<const char*, bool>>{
           {"--reshard-after-forward", !reshard_after_forward.empty()}, {"--no-prefetch", no_prefetch}}) {
    if (given && !runs_any_of({"fsdp"}) && !fsdp_tp_mesh) {
      throw UsageError(std::string(flag) + ": applies to fsdp (or a --mesh with fsdp and tp) only, which --strategy does not include");
    }
  }
  if (parsed_mesh) {
    const Mesh& parsed = *parsed_mesh;
    const bool tp_mesh = parsed.find("tp").has_value(), pp_mesh = parsed.find("pp").has_value();
    if (tp_mesh && pp_mesh) {
      throw UsageError("--mesh: tp and pp on one mesh (3-D) is not built yet; a mesh takes one of them");
    }
    if (!tp_mesh && !pp_mesh) {
      throw UsageError("--mesh: a mesh composes tp or pp with data parallelism, and " + mesh + " has neither");
    }
    const char* runs_on_it = tp_mesh ? "tp" : "pp";
    if (!runs_any_of({runs_on_it})) {
      throw UsageError("--mesh: " + mesh + " runs " + runs_on_it + " on its " + runs_on_it +
                       " dimension, and --strategy does not include it");
    }
    if (parsed.find("dp") && parsed.find("fsdp")) {
      throw UsageError("--mesh: dp and fsdp both split the batch and reduce the gradients; a mesh takes one of them");
    }
    if (parsed.size() > CpuMemoryCounter::kMaxWorldSize) {
      throw UsageError("--mesh: " + parsed.to_string() + " is " + std::to_string(parsed.size()) + " ranks, more than " +
                       std::to_string(CpuMemoryCounter::kMaxWorldSize));
    }
    r.strategy.mesh = parsed.to_string();
    cmd.devices.world_size = parsed.size();
  }
  r.strategy.tp.sequence_parallel = sequence_parallel;
  if (sequence_parallel && !runs_any_of({"tp"})) {
    throw UsageError("--sequence-parallel: applies to tp only, which --strategy does not include");
  }
  if (sequence_parallel && fsdp_mesh) {
    throw UsageError("--sequence-parallel: not yet on a mesh with fsdp (the LayerNorms' gradients, each rank's share of "
                     "the sequence, would have to be summed over the tp group inside fsdp's reduce-scatters)");
  }
  const bool runs_ddp = runs_any_of({"ddp"});
  const std::vector<std::pair<const char*, bool>> ddp_flags = {{"--grad-as-bucket-view", grad_as_bucket_view},
                                                              {"--sync-bn", sync_bn},
                                                              {"--checkpoint", !checkpoint.empty()}};
  for (const auto& [flag, given] : ddp_flags) {
    if (given && !runs_ddp) throw UsageError(std::string(flag) + ": applies to ddp only, which --strategy does not include");
  }
  if (sync_bn) {
    bool any = false;
    for (const auto& w : r.workloads) {
      const auto& workload = WorkloadRegistry::instance().get(w);
      if (workload.has_batch_norm() && !workload.converts_to_sync_batch_norm()) {
        throw UsageError("--sync-bn: the BatchNorm layers of " + w + " (a TorchScript model) cannot be made SyncBatchNorm");
      }
      any = any || workload.has_batch_norm();
    }
    if (!any) throw UsageError("--sync-bn: no selected workload has BatchNorm (convnet has)");
  }
  auto& hogwild = r.strategy.hogwild;
  if (hogwild_mode == "threads") {
    hogwild.mode = HogwildMode::Threads;
  } else if (hogwild_mode == "processes") {
    hogwild.mode = HogwildMode::Processes;
  } else {
    throw UsageError("--hogwild-mode: unknown mode '" + hogwild_mode + "' (expected threads or processes)");
  }
  if (!sync_every.empty()) hogwild.sync_every = static_cast<int>(parse_count("--sync-every", sync_every, 1, 1000000));
  if (!hogwild_workers.empty()) hogwild.workers = static_cast<int>(parse_count("--workers", hogwild_workers, 1, 256));
  const bool runs_hogwild = std::find(r.strategies.begin(), r.strategies.end(), "hogwild") != r.strategies.end();
  for (const auto& [flag, given] : std::vector<std::pair<const char*, bool>>{
           {"--hogwild-mode", app.count("--hogwild-mode") > 0}, {"--sync-every", !sync_every.empty()},
           {"--workers", !hogwild_workers.empty()}}) {
    if (given && !runs_hogwild) {
      throw UsageError(std::string(flag) + ": applies to hogwild only, which --strategy does not include");
    }
  }
  r.strategy.levers = lever_flags.apply(r.strategies, r.workloads, r.global_batch, fsdp_tp_mesh);
  r.strategy.pipeline = pipeline_flags.apply(runs_any_of({"pp"}), world_size.empty() ? std::nullopt
                                                                                     : std::optional<int>(cmd.devices.world_size));
  if (no_json && app.count("--json") > 0) throw UsageError("--no-json: cannot be given with --json " + json);
  if (no_json) {
    cmd.json_path.reset();
  } else {
    cmd.json_path = json;
  }
  return cmd;
}

std::vector<std::string> rank_command_line(const RunnerOptions& options, const DeviceSet& devices,
                                           const std::vector<std::string>& workloads,
                                           const std::vector<std::string>& strategies) {
  RankOptions rank;
  rank.runner = options;
  rank.runner.workloads = workloads;
  rank.runner.strategies = strategies;
  rank.runner.trace = nullptr;  // the launcher's own; ranks record into the store when a task asks
  rank.runner.strategy.hogwild.worker_executable.clear();
  rank.devices = DeviceRequest{devices.is_cuda() ? "cuda" : "cpu", devices.size(), devices.threads_per_device()};
  rank.sources = installed_workload_sources();
  return {kRankOptionsFlag, encode_rank_options(rank)};
}

}  // namespace ddpbench
