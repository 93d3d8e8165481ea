// The ddpbench executable end to end: bad input, --list, the JSON contract, a killed run.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include <regex>

#include "cli/cli.h"
#include "base/errors.h"
#include "cli/options_codec.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

// ---- the launcher's ranks get the resolved options whole (cli/options_codec.h) ------------

// The record a rank would run with, for comparing: the options of `cmd` as the launcher hands them on.
std::string record_of(const CommandLine& cmd) {
  const DeviceSet devices = resolve_devices(cmd.devices);
  const auto args = rank_command_line(cmd.runner, devices, cmd.runner.workloads, cmd.runner.strategies);
  EXPECT_EQ(args.size(), 2u);
  EXPECT_EQ(args.at(0), kRankOptionsFlag);
  return args.at(1);
}

TEST(RankOptions, EveryFlagOfHelpSurvivesTheTripToARank) {
  // A value for every flag that changes what a rank runs; a flag of --help missing here fails the
  // test, so a new flag cannot be forgotten on the way to the ranks.
  const std::map<std::string, std::vector<std::string>> changes = {
      {"--strategy", {"--strategy", "ddp"}},
      {"--workload", {"--workload", "convnet"}},
      {"--world-size", {"--world-size", "3"}},
      {"--batch", {"--batch", "64"}},
      {"--seq-len", {"--seq-len", "16", "--workload", "gpt2"}},
      {"--steps", {"--steps", "7"}},
      {"--warmup", {"--warmup", "2"}},
      {"--repetitions", {"--repetitions", "7"}},
      {"--target-precision", {"--target-precision", "0.05"}},
      {"--min-time", {"--min-time", "2"}},
      {"--max-time", {"--max-time", "30"}},
      {"--seed", {"--seed", "7"}},
      {"--threads", {"--threads", "3"}},
      {"--timeout", {"--timeout", "60.5"}},
      {"--loader-workers", {"--loader-workers", "2"}},
      {"--pin-memory", {"--pin-memory"}},
      {"--data-path", {"--data-path", "host"}},
      {"--data-on-device", {"--data-on-device"}},
      {"--dataset-size", {"--dataset-size", "999"}},
      {"--parity-steps", {"--parity-steps", "1"}},
      {"--parity-tolerance", {"--parity-tolerance", "0.125"}},
      {"--peak-tflops", {"--peak-tflops", "98.5"}},
      {"--dtype", {"--dtype", "bf16"}},
      {"--max-cv", {"--max-cv", "0.2"}},
      {"--slow-by", {"--slow-by", "0.1"}},
      {"--bucket-mb", {"--bucket-mb", "5"}},
      {"--no-overlap", {"--no-overlap"}},
      {"--grad-as-bucket-view", {"--grad-as-bucket-view"}},
      {"--sync-bn", {"--sync-bn", "--workload", "convnet"}},
      {"--checkpoint", {"--checkpoint", "/tmp/ddpbench-never-written.pt"}},
      {"--checkpoint-every", {"--checkpoint-every", "3", "--checkpoint", "/tmp/ddpbench-never-written.pt"}},
      {"--hogwild-mode", {"--hogwild-mode", "processes"}},
      {"--sync-every", {"--sync-every", "2"}},
      {"--workers", {"--workers", "3"}},
      {"--workload-lib", {"--workload-lib", DDPBENCH_EXAMPLE_PLUGIN, "--workload", "swish-mlp"}},
  };
  // The launching process's own flags, and those tested on their way elsewhere.
  const std::set<std::string> not_for_ranks = {
      "--help", "--version", "--list",  // no run
      "--json", "--no-json", "--trace",  // the launcher writes the results and the trace files
      "--device",                        // resolved before the trip: the record carries the device kind
      "--model", "--model-set",          // travel with --workload-lib; test_models.cpp runs them on ranks
  };
  const std::string help = parse_command_line({"ddpbench", "--help"}).text;
  std::set<std::string> flags;
  const std::regex flag("--[a-z][a-z0-9-]*");
  for (auto it = std::sregex_iterator(help.begin(), help.end(), flag); it != std::sregex_iterator(); ++it) {
    flags.insert(it->str());
  }
  ASSERT_GT(flags.size(), 30u) << help;
  const std::string base = record_of(parse_command_line({"ddpbench"}));
  for (const auto& f : flags) {
    if (not_for_ranks.count(f) != 0) continue;
    SCOPED_TRACE(f);
    const auto change = changes.find(f);
    ASSERT_NE(change, changes.end()) << f << " is in --help but not in this test: say what it changes in a rank";
    std::vector<std::string> argv = {"ddpbench"};
    argv.insert(argv.end(), change->second.begin(), change->second.end());
    const std::string sent = record_of(parse_command_line(argv));
    EXPECT_NE(sent, base) << f << " changes nothing the ranks are sent";
    // The rank parses what it is sent, and would send on exactly the same.
    const CommandLine rank = parse_command_line({"ddpbench", kRankOptionsFlag, sent});
    EXPECT_FALSE(rank.json_path.has_value());
    EXPECT_EQ(record_of(rank), sent);
  }
}

TEST(RankOptions, AMalformedRecordIsAUsageError) {
  EXPECT_THROW(parse_command_line({"ddpbench", kRankOptionsFlag, "{}"}), UsageError);
  EXPECT_THROW(parse_command_line({"ddpbench", kRankOptionsFlag, "not json"}), UsageError);
}

using nlohmann::json;
using testing::ddpbench_args;
using testing::directory_entries;
using testing::path_exists;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;

// A run small enough for a test: two steps, two repetitions, tiny batches. A flag in `extra` that is
// also a default here replaces the default (a flag given twice is an error of its own).
std::vector<std::string> tiny_run(const std::string& json_path, std::vector<std::string> extra = {}) {
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

struct BadInput {
  std::vector<std::string> args;
  std::string flag;  // the one line must name it
  std::string says;  // and say this about it
};

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, ExitsTwoWithOneLineNamingTheFlagAndWritesNothing) {
  ScratchDir dir;
  const auto json_path = dir.file("results.json");
  auto args = tiny_run(json_path, GetParam().args);
  const auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().flag), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(GetParam().says), std::string::npos) << r.err;
  EXPECT_FALSE(path_exists(json_path));
  EXPECT_EQ(directory_entries(dir.path()).size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Cli, BadInputTest,
    ::testing::Values(
        BadInput{{"--strategy", "fsdp"}, "--strategy", "unknown name 'fsdp'"},
        BadInput{{"--strategy", "single,"}, "--strategy", "empty name"},
        BadInput{{"--workload", "resnet"}, "--workload", "unknown name 'resnet'"},
        BadInput{{"--steps", "0"}, "--steps", "at least 1, got 0"},
        BadInput{{"--steps", "-3"}, "--steps", "at least 1, got -3"},
        BadInput{{"--steps", "ten"}, "--steps", "'ten' is not a whole number"},
        BadInput{{"--repetitions", "0"}, "--repetitions", "at least 1"},
        BadInput{{"--warmup", "-1"}, "--warmup", "at least 0"},
        BadInput{{"--batch", "0"}, "--batch", "at least 1, got 0"},
        BadInput{{"--batch", "1.5"}, "--batch", "not a whole number"},
        BadInput{{"--batch", "1", "--world-size", "2", "--strategy", "dp"}, "--batch", "smaller than the world size"},
        BadInput{{"--batch", "8", "--batch", "9"}, "--batch", "received 2"},
        BadInput{{"--world-size", "0"}, "--world-size", "at least 1"},
        BadInput{{"--threads", "x"}, "--threads", "not a whole number"},
        BadInput{{"--timeout", "-1"}, "--timeout", "more than 0"},
        BadInput{{"--timeout", "soon"}, "--timeout", "not a number"},
        BadInput{{"--seed", "-1"}, "--seed", "at least 0"},
        BadInput{{"--loader-workers", "-2"}, "--loader-workers", "at least 0"},
        BadInput{{"--device", "tpu"}, "--device", "unknown device 'tpu'"},
        BadInput{{"--pin-memory"}, "--pin-memory", "needs --device cuda"},
        BadInput{{"--dataset-size", "4"}, "--dataset-size", "cannot fill a global batch of 8"},
        BadInput{{"--max-cv", "-0.1"}, "--max-cv", "not a non-negative number"},
        BadInput{{"--trace", "/proc/version/traces"}, "--trace", "'/proc/version' is in the way"},
        BadInput{
            {"--json", "/no/such/dir/r.json"}, "--json", "does not exist (create it first: mkdir -p '/no/such/dir')"},
        // An empty value is never the default in disguise.
        BadInput{{"--trace", ""}, "--trace", "empty value"},
        BadInput{{"--parity-tolerance", ""}, "--parity-tolerance", "empty value"},
        BadInput{{"--peak-tflops", ""}, "--peak-tflops", "empty value"},
        BadInput{{"--steps", ""}, "--steps", "empty value"},
        // Numbers are decimal, whole, and nothing else: no hex, no blanks on either side, no inf.
        BadInput{{"--peak-tflops", "0x10"}, "--peak-tflops", "'0x10' is not a positive number"},
        BadInput{{"--max-cv", "0x1p-3"}, "--max-cv", "not a non-negative number"},
        BadInput{{"--timeout", "inf"}, "--timeout", "not a number of seconds"},
        BadInput{{"--steps", " 3"}, "--steps", "' 3' is not a whole number"},
        BadInput{{"--steps", "3 "}, "--steps", "'3 ' is not a whole number"},
        BadInput{{"--batch", "0x8"}, "--batch", "not a whole number"},
        BadInput{{"--no-json"}, "--no-json", "cannot be given with --json"},
        BadInput{{"--max-time", "5"}, "--max-time", "applies to adaptive sampling"},  // with --repetitions 2
        BadInput{{"--target-precision", "1"}, "--target-precision", "+-100% or more"},
        BadInput{{"--target-precision", "-0.1"}, "--target-precision", "not a non-negative number"},
        BadInput{{"--target-precision", "0.1", "--repetitions", "1"}, "--repetitions", "at least 2"},
        BadInput{
            {"--target-precision", "0.1", "--min-time", "9", "--max-time", "3"}, "--max-time", "less than --min-time"},
        BadInput{{"--slow-by", "-0.1"}, "--slow-by", "not a non-negative number"},
        BadInput{{"--slow-by", "11"}, "--slow-by", "more than 10"},
        BadInput{{"--strategy", "ddp", "--checkpoint", "/tmp/ddpbench-never-written.pt", "--checkpoint-every", "1000"},
                 "--checkpoint-every",
                 "more than the 3 steps of a repetition"},
        BadInput{{"--hogwild-mode", "fibers", "--strategy", "hogwild"}, "--hogwild-mode", "unknown mode 'fibers'"},
        BadInput{{"--sync-every", "0", "--strategy", "hogwild"}, "--sync-every", "at least 1"},
        BadInput{{"--sync-every", "2", "--strategy", "single"}, "--sync-every", "applies to hogwild only"},
        BadInput{{"--hogwild-mode", "processes", "--strategy", "dp"}, "--hogwild-mode", "applies to hogwild only"},
        BadInput{{"--dtype", "fp64"}, "--dtype", "unknown dtype 'fp64'"},
        BadInput{{"--dtype", "fp16"}, "--dtype", "fp16 autocast needs CUDA"},  // a CPU run
        BadInput{{"--peak-tflops", "0"}, "--peak-tflops", "not a positive number"},
        BadInput{{"--peak-tflops", "fast"}, "--peak-tflops", "not a positive number"},
        BadInput{{"--data-path", "disk"}, "--data-path", "unknown data path 'disk'"},
        BadInput{{"--strategy", "hogwild", "--workers", "0"}, "--workers", "at least 1, got 0"},
        BadInput{{"--strategy", "single", "--workers", "4"}, "--workers", "applies to hogwild only"},
        BadInput{{"--data-on-device", "--data-path", "host"}, "--data-on-device", "contradicts --data-path host"},
        BadInput{{"--seq-len", "64"}, "--seq-len", "none of the workloads run takes a sequence length"},
        BadInput{{"--workload", "gpt2", "--seq-len", "2048"}, "--seq-len", "at most 1024, got 2048"},
        BadInput{{"--workload", "gpt2", "--seq-len", "0"}, "--seq-len", "at least 1, got 0"},
        BadInput{{"--no-such-flag"}, "--no-such-flag", ""}));

TEST(Cli, DeviceCudaWithoutCudaExitsTwo) {
  // Meaningful only where no GPU is visible; on a GPU machine the CUDA path is tested elsewhere.
  ScratchDir dir;
  const auto r = run_process(ddpbench_args({"--device", "cuda", "--world-size", "64", "--json", dir.file("r.json")}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.err.find("--device") != std::string::npos || r.err.find("--world-size") != std::string::npos) << r.err;
  EXPECT_FALSE(path_exists(dir.file("r.json")));
}

TEST(Cli, MaxCvMarksNoisyCasesInTableAndJson) {
  // Real timings always vary a little: with --max-cv 0 every case is noisy, with 10 (1000%) none is.
  for (const auto& [max_cv, noisy] : std::vector<std::pair<std::string, bool>>{{"0", true}, {"10", false}}) {
    ScratchDir dir;
    const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--max-cv", max_cv}));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.find("* noisy: repetitions vary more than --max-cv") != std::string::npos, noisy) << r.out;
    const json doc = json::parse(read_text(dir.file("r.json")));
    for (const auto& b : doc["benchmarks"]) EXPECT_EQ(b["ddpbench"]["noisy"].get<bool>(), noisy) << b["name"];
  }
}

TEST(Cli, WorldSizeOneRunsAndSaysItDegenerates) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "dp", "--world-size", "1"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("mlp/dp/world:1: world size 1: dp degenerates to one device"), std::string::npos) << r.out;
  const json doc = json::parse(read_text(dir.file("r.json")));
  EXPECT_EQ(doc["benchmarks"][0]["ddpbench"]["status"], "ok");
  EXPECT_NE(doc["benchmarks"][0]["ddpbench"]["note"].get<std::string>().find("degenerates"), std::string::npos);
}

TEST(Cli, UnwritableJsonPathExitsTwo) {
  ScratchDir dir;
  for (const std::string& path : {dir.file("no/such/dir/r.json"), dir.path(), std::string("/proc/r.json")}) {
    const auto r = run_process(tiny_run(path));
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.err;
    EXPECT_NE(r.err.find("--json"), std::string::npos) << r.err;
  }
}

TEST(Cli, ListNamesEveryStrategyAndWorkload) {
  const auto r = run_process(ddpbench_args({"--list"}));
  ASSERT_EQ(r.exit_code, 0);
  for (const char* name : {"single", "dp", "dp-loss-in-model", "ddp", "hogwild", "mlp", "convnet", "transformer",
                           "wide-logits"}) {
    EXPECT_NE(r.out.find(std::string("  ") + name + " "), std::string::npos) << name;
  }
}

TEST(Cli, HelpAndVersionExitZero) {
  const auto help = run_process(ddpbench_args({"--help"}));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--strategy"), std::string::npos);
  const auto version = run_process(ddpbench_args({"--version"}));
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("ddpbench "), std::string::npos);
}

// The shape of a JSON document: one "path: type" line per key, array elements merged under [*].
void collect_shape(const json& j, const std::string& path, std::map<std::string, std::set<std::string>>& out) {
  std::string type = j.is_object() ? "object" : j.is_array() ? "array" : j.is_string() ? "string"
                   : j.is_boolean() ? "boolean" : j.is_null() ? "null" : j.is_number_integer() ? "integer" : "number";
  if (type == "integer" || type == "number") type = "number";
  // Null on a CPU-only LibTorch and a string on a CUDA build: one golden file serves both builds.
  if ((path == "/context/ddpbench/cuda_version" || path == "/context/ddpbench/nccl_version") &&
      (type == "null" || type == "string")) {
    out[path].insert({"null", "string"});
    return;
  }
  out[path].insert(type);
  if (path == "/context/ddpbench/env") return;  // its keys are the machine's environment
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) collect_shape(v, path + "/" + k, out);
  } else if (j.is_array() && path != "/context/ddpbench/argv") {
    for (const auto& v : j) collect_shape(v, path + "/[*]", out);
  }
}

std::string shape_text(const json& j) {
  std::map<std::string, std::set<std::string>> shape;
  collect_shape(j, "", shape);
  std::string text;
  for (const auto& [path, types] : shape) {
    std::string t;
    for (const auto& x : types) t += (t.empty() ? "" : "|") + x;
    text += (path.empty() ? "/" : path) + ": " + t + "\n";
  }
  return text;
}

// Runs a tiny successful case and returns its results document.
json tiny_results(const std::vector<std::string>& extra) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  const auto r = run_process(tiny_run(path, extra));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return json::parse(read_text(path));
}

TEST(Cli, JsonMatchesTheGoldenShape) {
  const json doc = tiny_results({"--strategy", "all", "--workload", "mlp"});
  const std::string golden_path = std::string(DDPBENCH_SOURCE_DIR) + "/tests/golden/json_shape.txt";
  const std::string shape = shape_text(doc);
  if (std::getenv("DDPBENCH_UPDATE_GOLDEN")) {
    std::ofstream(golden_path) << shape;
    GTEST_SKIP() << "golden file rewritten: " << golden_path;
  }
  EXPECT_EQ(shape, read_text(golden_path)) << "run with DDPBENCH_UPDATE_GOLDEN=1 to accept a deliberate change";
}

TEST(Cli, JsonHoldsTheContractsValues) {
  const json doc = tiny_results({"--strategy", "single,ddp", "--workload", "mlp"});
  EXPECT_EQ(doc["context"]["json_schema_version"], 1);
  EXPECT_TRUE(doc["context"]["ddpbench"]["complete"].get<bool>());
  EXPECT_EQ(doc["context"]["ddpbench"]["argv"].back(), "mlp");
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["phase_timer"], "steady_clock");  // a CPU run
  std::map<std::string, int> by_type;
  for (const auto& b : doc["benchmarks"]) {
    const auto& d = b["ddpbench"];
    EXPECT_EQ(d["parity"]["dtype"], "fp64") << "fp32 runs check parity in float64";
    if (d["strategy"] == "ddp") {
      // Every rank's figures are gathered into rank 0's record, with the all-reduce's.
      EXPECT_EQ(d["status"], "ok") << d["reason"];
      EXPECT_EQ(d["world_size"], 2);
      EXPECT_EQ(d["comm"]["backend"], "gloo");
      EXPECT_GT(d["comm"]["bytes_per_step"].get<double>(), 2913290 * 4);  // every gradient, plus the loss
      EXPECT_GE(d["comm"]["buckets"].get<int>(), 1);
      EXPECT_EQ(d["memory"].size(), 2u);
      if (b["run_type"] == "iteration") {
        ASSERT_EQ(d["ranks"].size(), 2u);
        EXPECT_EQ(d["ranks"][1]["rank"], 1);
        EXPECT_GT(d["ranks"][1]["step_time_ms"].get<double>(), 0);
        EXPECT_GE(d["straggler_spread"].get<double>(), 1.0);
        EXPECT_GT(d["comm"]["busbw_gbps"].get<double>(), 0);
        // The bucket timeline a projection replays: every bucket, its bytes adding up to the
        // step's, ready within backward (plus the wait after it) and all-reduced in measurable time.
        const auto& timeline = d["comm"]["bucket_timeline"];
        ASSERT_EQ(timeline.size(), d["comm"]["buckets"].get<std::size_t>());
        std::int64_t bytes = 0;
        const double backward_ms = d["phases_ms"]["backward"].get<double>() + d["phases_ms"]["comm_exposed"].get<double>();
        for (const auto& bucket : timeline) {
          bytes += bucket["bytes"].get<std::int64_t>();
          EXPECT_GT(bucket["ready_ms"].get<double>(), 0);
          EXPECT_LE(bucket["ready_ms"].get<double>(), backward_ms * 1.5) << bucket;
          EXPECT_GT(bucket["allreduce_ms"].get<double>(), 0);
        }
        EXPECT_EQ(bytes, d["comm"]["bytes_per_step"].get<std::int64_t>());
      }
      continue;
    }
    EXPECT_EQ(b["run_name"], "mlp/single/world:1");
    EXPECT_EQ(b["time_unit"], "ms");
    EXPECT_EQ(d["global_batch"], 8);
    const std::string type = b["run_type"] == "aggregate" ? b["aggregate_name"].get<std::string>() : "iteration";
    ++by_type[type];
    if (type == "iteration") {
      EXPECT_EQ(b["iterations"], 2);
      EXPECT_EQ(d["step_times_ms"].size(), 2u);
      double mean = (d["step_times_ms"][0].get<double>() + d["step_times_ms"][1].get<double>()) / 2;
      EXPECT_NEAR(b["real_time"].get<double>(), mean, 1e-9);
      EXPECT_NEAR(b["items_per_second"].get<double>(), 8 / (mean / 1e3), 1e-6);
    }
  }
  EXPECT_EQ(by_type, (std::map<std::string, int>{{"iteration", 2}, {"median", 1}, {"mean", 1}, {"stddev", 1}, {"cv", 1}}));
}

TEST(Cli, Bf16RunSaysItsDtypeAndReadsItsTflopsAgainstTheGivenPeak) {
  const json doc = tiny_results({"--strategy", "single,dp", "--workload", "mlp", "--dtype", "bf16", "--peak-tflops", "2"});
  const auto& settings = doc["context"]["ddpbench"]["settings"];
  EXPECT_EQ(settings["dtype"], "bf16");
  EXPECT_DOUBLE_EQ(settings["parity_tolerance"].get<double>(), 1e-2);  // bf16's default
  int checked = 0;
  for (const auto& b : doc["benchmarks"]) {
    const auto& d = b["ddpbench"];
    ASSERT_EQ(d["status"], "ok") << d["reason"];
    EXPECT_TRUE(d["parity"]["within_tolerance"].get<bool>()) << d["parity"];
    EXPECT_EQ(d["parity"]["dtype"], "bf16") << "the autocast path itself is what bf16 parity checks";
    const auto& compute = d["compute"];
    const double flops_per_sample = d["workload_facts"]["flops_per_sample"].get<double>();
    EXPECT_DOUBLE_EQ(compute["flops_per_step"].get<double>(), 8 * flops_per_sample);
    const int devices = d["strategy"] == "dp" ? 2 : 1;  // --peak-tflops is one device's
    EXPECT_DOUBLE_EQ(compute["peak_tflops"].get<double>(), 2.0 * devices);
    const std::string type = b["run_type"] == "aggregate" ? b["aggregate_name"].get<std::string>() : "iteration";
    if (type == "iteration" || type == "median") {
      const double achieved = b["items_per_second"].get<double>() * flops_per_sample / 1e12;
      EXPECT_NEAR(compute["achieved_tflops"].get<double>(), achieved, 1e-12);
      EXPECT_NEAR(compute["fraction_of_peak"].get<double>(), achieved / (2.0 * devices), 1e-12);
      ++checked;
    } else if (type == "cv") {
      EXPECT_TRUE(compute["fraction_of_peak"].is_null());
      EXPECT_TRUE(compute["achieved_tflops"].is_null());
    }
  }
  EXPECT_EQ(checked, 6);
}

TEST(Cli, CpuRunHasNoPeakUnlessGivenOne) {
  const json doc = tiny_results({"--strategy", "single", "--workload", "mlp"});
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["dtype"], "fp32");
  for (const auto& b : doc["benchmarks"]) {
    EXPECT_TRUE(b["ddpbench"]["compute"]["peak_tflops"].is_null());
    EXPECT_TRUE(b["ddpbench"]["compute"]["fraction_of_peak"].is_null());
  }
}

TEST(Cli, MedianAggregateCarriesTheStepDistribution) {
  const json doc = tiny_results({"--strategy", "single", "--steps", "5", "--repetitions", "2"});
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_type"] != "aggregate" || b["aggregate_name"] != "median") continue;
    const auto& d = b["ddpbench"]["step_time_ms"];
    EXPECT_EQ(d["samples"], 10);
    EXPECT_LE(d["p10"].get<double>(), d["p50"].get<double>());
    EXPECT_LE(d["p50"].get<double>(), d["p90"].get<double>());
    ASSERT_TRUE(d["median_ci95"].is_object());  // 10 samples are enough for 95%
    EXPECT_LE(d["median_ci95"]["low"].get<double>(), d["p50"].get<double>());
    EXPECT_GE(d["median_ci95"]["high"].get<double>(), d["p50"].get<double>());
  }
}

TEST(Cli, TraceHasEveryMeasuredStepWithItsPhasesNestedInside) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single,dp", "--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trace = testing::read_trace(dir.file("ddpbench-rank0.json"));  // one file for the one rank
  EXPECT_EQ(trace.doc["distributedInfo"]["rank"], 0);
  std::vector<json> steps, phases;
  for (const auto& e : trace.events) (e["name"] == "step" ? steps : phases).push_back(e);
  EXPECT_EQ(steps.size(), 2u * 2u * 2u);  // 2 cases x 2 repetitions x 2 measured steps
  std::set<std::string> names;
  for (const auto& p : phases) {
    names.insert(p["name"].get<std::string>());
    // Each phase lies inside the step of the same case, repetition and step number.
    EXPECT_TRUE(std::any_of(steps.begin(), steps.end(), [&](const json& s) {
      return s["args"] == p["args"] && s["tid"] == p["tid"] && testing::within(p, s);
    })) << p.dump();
  }
  for (const char* n : {"data", "forward", "backward", "optimizer", "replicate", "scatter", "gather_loss", "reduce"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
}

TEST(Cli, NumbersInEveryDecimalSpellingAreAccepted) {
  for (const auto& value : {"0.05", "5e-2", ".5", "+1", "1.", "2E1"}) {
    SCOPED_TRACE(value);
    ScratchDir dir;
    const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--max-cv", value}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

TEST(Cli, OutOfMemoryIsItsOwnStatusAndTheRunGoesOn) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  // A dataset of 10^11 samples: no machine has the memory, and LibTorch's CPU allocator says
  // "can't allocate memory", not "out of memory".
  const auto r = run_process(tiny_run(path, {"--strategy", "single,dp", "--dataset-size", "100000000000"}));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  const json doc = json::parse(read_text(path));
  int oom = 0;
  for (const auto& b : doc["benchmarks"]) {
    EXPECT_EQ(b["ddpbench"]["status"], "oom") << b["run_name"];
    EXPECT_NE(b["ddpbench"]["reason"].get<std::string>().find("can't allocate memory"), std::string::npos);
    ++oom;
  }
  EXPECT_EQ(oom, 2) << "the case after the first out-of-memory case was not tried";
  EXPECT_NE(r.err.find("ddpbench: error: mlp/dp/world:2 oom: "), std::string::npos) << r.err;
}

// A run without --repetitions samples adaptively: it is what `ddpbench --strategy all` does.
std::vector<std::string> adaptive_run(const std::string& json_path, std::vector<std::string> extra) {
  std::vector<std::string> args = {"--device", "cpu", "--threads", "1", "--steps", "2", "--warmup", "1",
                                   "--batch", "8", "--dataset-size", "16", "--json", json_path};
  if (std::find(extra.begin(), extra.end(), "--strategy") == extra.end()) args.insert(args.end(), {"--strategy", "single"});
  args.insert(args.end(), extra.begin(), extra.end());
  return ddpbench_args(args);
}

const json& median_entry(const json& doc, const std::string& name) {
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_name"] == name && b.value("aggregate_name", "") == "median") return b;
  }
  throw std::runtime_error("no median entry for " + name);
}

// Runs ddpbench with `args_for(a results path)`; the process's result and the JSON it wrote (null
// when it wrote none).
std::pair<testing::ProcessResult, json> run_with_json(
    const std::function<std::vector<std::string>(const std::string&)>& args_for) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  auto r = run_process(args_for(path));
  return {r, path_exists(path) ? json::parse(read_text(path)) : json()};
}

TEST(Cli, AdaptiveSamplingStopsACaseOnceItsIntervalIsWithinTheTarget) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  // +-50%: reached after the fewest repetitions (3), whatever this machine's noise.
  const auto r = run_process(adaptive_run(path, {"--target-precision", "0.5", "--min-time", "0"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("until each case's lower-quartile step is within +-50%"), std::string::npos) << r.out;
  const json doc = json::parse(read_text(path));
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["target_precision"], 0.5);
  const json median = median_entry(doc, "mlp/single/world:1");  // a copy: GCC 14 warns of a dangling reference
  const json precision = median["ddpbench"]["precision"];
  EXPECT_FALSE(precision["unresolved"].get<bool>());
  EXPECT_LE(precision["achieved_ci95"].get<double>(), 0.5);
  EXPECT_GE(median["repetitions"].get<int>(), 3);
  EXPECT_EQ(r.out.find("unresolved"), std::string::npos) << r.out;
}

TEST(Cli, ACaseThatRunsOutOfTimeIsMarkedUnresolvedWithWhatItAchieved) {
  // +-0.001%: no machine gets there within 2 s.
  const auto [r, doc] = run_with_json([](const std::string& path) {
    return adaptive_run(path, {"--target-precision", "0.00001", "--max-time", "2"});
  });
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json precision = median_entry(doc, "mlp/single/world:1")["ddpbench"]["precision"];
  EXPECT_TRUE(precision["unresolved"].get<bool>());
  EXPECT_GT(precision["achieved_ci95"].get<double>(), 0.00001);
  EXPECT_GE(precision["seconds_spent"].get<double>(), 2.0);
  EXPECT_LT(precision["seconds_spent"].get<double>(), 30.0) << "the cap did not stop it";
  EXPECT_NE(r.out.find("! unresolved: --max-time 2 s ran out"), std::string::npos) << r.out;
}

TEST(Cli, RepetitionsAloneMeanExactlyThatMany) {
  const auto [r, doc] = run_with_json([](const std::string& path) {
    return adaptive_run(path, {"--repetitions", "4"});
  });
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["target_precision"], nullptr);
  EXPECT_EQ(median_entry(doc, "mlp/single/world:1")["repetitions"], 4);
}

// CV of the real_time of a case's iteration entries, as the JSON has them.
double cv_of_iterations(const json& doc, const std::string& name) {
  std::vector<double> times;
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_name"] == name && b["run_type"] == "iteration") times.push_back(b["real_time"].get<double>());
  }
  double mean = 0, var = 0;
  for (double t : times) mean += t / static_cast<double>(times.size());
  for (double t : times) var += (t - mean) * (t - mean) / static_cast<double>(times.size() - 1);
  return std::sqrt(var) / mean;
}

TEST(Cli, TheNoiseFloorIsSinglesSpreadAndEveryCaseIsReadAgainstIt) {
  const auto [r, doc] = run_with_json([](const std::string& path) {
    return adaptive_run(path, {"--strategy", "single,dp", "--repetitions", "3"});
  });
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto& floor = doc["context"]["ddpbench"]["noise_floor"];
  ASSERT_EQ(floor.size(), 1u);
  EXPECT_EQ(floor[0]["workload"], "mlp");
  EXPECT_EQ(floor[0]["from"], "single");
  const double single_cv = cv_of_iterations(doc, "mlp/single/world:1");
  EXPECT_NEAR(floor[0]["cv"].get<double>(), single_cv, 1e-9);
  const double ratio = median_entry(doc, "mlp/dp/world:2")["ddpbench"]["cv_over_noise_floor"].get<double>();
  EXPECT_NEAR(ratio, cv_of_iterations(doc, "mlp/dp/world:2") / single_cv, 1e-6);
}

TEST(Cli, SlowBySleepsInsideEveryStep) {
  const auto [r, doc] = run_with_json([](const std::string& path) {
    return adaptive_run(path, {"--repetitions", "2", "--slow-by", "1"});
  });
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["slow_by"], 1.0);
  // The sleep is part of the timed step, outside every phase: a step that doubled spends about
  // half of itself in the residual.
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_type"] != "iteration") continue;
    const double residual = b["ddpbench"]["phases_ms"]["residual"].get<double>();
    EXPECT_GT(residual, 0.4 * b["real_time"].get<double>()) << b.dump();
  }
}

TEST(Cli, MoreThreadsThanCoresRunsButSaysSo) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--threads", "64"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ddpbench: warning: --threads 64 on each of 2 device(s) is 128 threads on"), std::string::npos)
      << r.err;
  const auto quiet = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--threads", "1"}));
  EXPECT_EQ(quiet.err.find("warning"), std::string::npos) << quiet.err;
}

TEST(Cli, TraceMakesItsDirectory) {
  ScratchDir dir;
  const auto traces = dir.file("new/deeper");
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--trace", traces}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(directory_entries(traces), std::vector<std::string>{"ddpbench-rank0.json"});
  // A refused run makes nothing: the directory is the last thing checked.
  const auto refused = run_process(tiny_run(dir.file("r.json"), {"--strategy", "fsdp", "--trace", dir.file("never")}));
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_FALSE(path_exists(dir.file("never")));
}

TEST(Cli, AHungStepEndsTheRunWithinTheTimeoutKeepingWhatWasMeasured) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  // DDPBENCH_FAULT_HANG makes the first measured step of that case hang (fault injection).
  const auto r = run_process(tiny_run(path, {"--strategy", "single,dp,dp-loss-in-model", "--timeout", "2"}),
                             /*kill_after_ms=*/60000, {{"DDPBENCH_FAULT_HANG", "mlp/dp/world:2"}});
  ASSERT_EQ(r.signal, 0) << "still running after 60 s: the watchdog did not end it";
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_LT(r.seconds, 30);
  EXPECT_NE(r.err.find("mlp/dp/world:2: timed out: no step finished within 2 s (--timeout)"), std::string::npos) << r.err;
  const json doc = json::parse(read_text(path));
  EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
  bool single_kept = false, dp_failed = false, never_reached = false;
  for (const auto& b : doc["benchmarks"]) {
    if (b["run_name"] == "mlp/single/world:1" && b["run_type"] == "iteration") single_kept = true;
    if (b["run_name"] == "mlp/dp/world:2") {
      dp_failed = b["ddpbench"]["status"] == "failed" && b["error_occurred"] == true &&
                  b["ddpbench"]["reason"].get<std::string>().find("timed out") != std::string::npos;
    }
    // The case after the hung one never ran: it says so, rather than "ok" with nothing behind it.
    if (b["run_name"] == "mlp/dp-loss-in-model/world:2") {
      never_reached = b["ddpbench"]["status"] == "not_run" && b["error_occurred"] == true &&
                      b["ddpbench"]["reason"] == "not run: the --timeout watchdog stopped the run first";
    }
  }
  EXPECT_TRUE(single_kept) << "the repetition measured before the hang is lost";
  EXPECT_TRUE(dp_failed);
  EXPECT_TRUE(never_reached);
  EXPECT_NE(r.out.find("mlp/dp-loss-in-model/world:2  not_run"), std::string::npos) << r.out;
}

TEST(Cli, KilledRunLeavesNoTruncatedJson) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  // Long enough to be killed mid-run; killed at different moments.
  for (int delay_ms : {150, 700, 1500}) {
    ::unlink(path.c_str());
    const auto r = run_process(ddpbench_args({"--device", "cpu", "--threads", "1", "--strategy", "single", "--workload",
                                              "all", "--steps", "50", "--repetitions", "3", "--batch", "16", "--json",
                                              path}),
                               delay_ms);
    ASSERT_EQ(r.signal, SIGKILL) << "the run ended before it was killed; make it longer";
    if (!path_exists(path)) continue;  // killed before the first update: nothing written
    const json doc = json::parse(read_text(path));  // throws on a truncated document
    EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
    for (const auto& name : directory_entries(dir.path())) {
      if (dir.file(name) != path) ADD_FAILURE() << "left behind: " << dir.file(name);
    }
  }
}

// A run in the background, long enough to be signalled or contended while it writes `path`.
pid_t start_long_run(const std::string& path) {
  return testing::start_process(ddpbench_args({"--device", "cpu", "--threads", "1", "--strategy", "single",
                                               "--workload", "mlp", "--steps", "20", "--repetitions", "100",
                                               "--batch", "16", "--json", path}));
}

// Bad output paths are found before anything is measured: exit 2, one line naming the flag,
// nothing measured (no case in the table), and what was at the path is as it was.
void expect_refused_before_measuring(const testing::ProcessResult& r, const std::string& flag) {
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(flag + ": "), std::string::npos) << r.err;
  EXPECT_EQ(r.out.find("/world:"), std::string::npos) << "measured before refusing:\n" << r.out;
}

TEST(Cli, OutputsThatAreNotWritableRegularFilesAreRefusedUntouched) {
  ScratchDir dir;
  const auto fifo = dir.file("fifo"), link = dir.file("link"), linked = dir.file("linked.json");
  const auto read_only = dir.file("read-only.json"), device = dir.file("null");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  std::ofstream(linked) << "the link's target";
  ASSERT_EQ(::symlink("linked.json", link.c_str()), 0);
  std::ofstream(read_only) << "keep me";
  ASSERT_EQ(::chmod(read_only.c_str(), 0444), 0);
  std::vector<std::string> refused{fifo, link, read_only, "-", dir.file(std::string(245, 'x') + ".json")};
  if (::geteuid() == 0 && ::mknod(device.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0) refused.push_back(device);
  for (const auto& path : refused) {
    SCOPED_TRACE(path);
    expect_refused_before_measuring(run_process(tiny_run(path, {"--strategy", "single"})), "--json");
  }
  struct stat st{};
  EXPECT_TRUE(::lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode));
  EXPECT_TRUE(::lstat(link.c_str(), &st) == 0 && S_ISLNK(st.st_mode));
  EXPECT_EQ(read_text(linked), "the link's target");
  EXPECT_EQ(read_text(read_only), "keep me");
  if (refused.back() == device) {
    EXPECT_TRUE(::lstat(device.c_str(), &st) == 0 && S_ISCHR(st.st_mode));
  }
}

TEST(Cli, CheckpointPathsAreCheckedBeforeMeasuring) {
  ScratchDir dir;
  for (const auto& path : {dir.path(), dir.file("missing/model.pt")}) {
    SCOPED_TRACE(path);
    const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "ddp", "--checkpoint", path}));
    expect_refused_before_measuring(r, "--checkpoint");
  }
  EXPECT_FALSE(path_exists(dir.file("r.json")));
}

TEST(Cli, TwoOutputsOfOneRunMayNotBeOneFile) {
  ScratchDir dir;
  const auto same = dir.file("same.json");
  const auto one_file =
      run_process(tiny_run(same, {"--strategy", "single,ddp", "--checkpoint", dir.file("./same.json")}));
  expect_refused_before_measuring(one_file, "--checkpoint");
  // The trace of rank 0 is DIR/ddpbench-rank0.json; rank 1's too when ddp runs on two ranks.
  expect_refused_before_measuring(
      run_process(tiny_run(dir.file("ddpbench-rank1.json"), {"--strategy", "single,ddp", "--trace", dir.path()})),
      "--trace");
  EXPECT_TRUE(directory_entries(dir.path()).empty());
}

TEST(Cli, AReplacedResultsFileKeepsItsMode) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  std::ofstream(path) << "previous results";
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
  const auto r = run_process(tiny_run(path, {"--strategy", "single"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  struct stat st{};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_NE(read_text(path).find("\"benchmarks\""), std::string::npos);
}

TEST(Cli, ASecondLiveRunMayNotWriteTheSameJson) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  const pid_t first = start_long_run(path);
  for (int i = 0; i < 600 && !path_exists(path); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const auto second = run_process(tiny_run(dir.file("./results.json"), {"--strategy", "single"}));
  ::kill(first, SIGKILL);
  ::waitpid(first, nullptr, 0);
  expect_refused_before_measuring(second, "--json");
  EXPECT_NE(second.err.find("another ddpbench run"), std::string::npos) << second.err;
  // The first run's lock went with it: nothing stays behind to block the next run.
  const auto third = run_process(tiny_run(path, {"--strategy", "single"}));
  EXPECT_EQ(third.exit_code, 0) << third.err;
  EXPECT_EQ(directory_entries(dir.path()), std::vector<std::string>{"results.json"});
}

// SIGINT or SIGTERM ends a run within 2 s in whatever phase it is, with the 130 of an interrupt.
// (The rendezvous and worker start-up phases are tested with ddp and hogwild.)
TEST(Cli, SignalsDuringTheParityCheckEndTheRunWithinTwoSeconds) {
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(signal));
    ScratchDir dir;
    const auto path = dir.file("r.json");
    // 10000 parity steps of wide-logits: minutes, so the signal lands in the parity check.
    const auto r = run_process(tiny_run(path, {"--workload", "wide-logits", "--strategy", "single,dp", "--parity-steps",
                                               "10000"}),
                               /*kill_after_ms=*/2000, {}, signal);
    EXPECT_EQ(r.exit_code, 130) << r.err;
    EXPECT_LT(r.seconds_after_signal, 2.0);
    const json doc = json::parse(read_text(path));
    EXPECT_TRUE(doc["context"]["ddpbench"].contains("interruption"));
    for (const auto& b : doc["benchmarks"]) {
      EXPECT_EQ(b["ddpbench"]["status"], "not_run") << b["run_name"];
      EXPECT_EQ(b["ddpbench"]["reason"], "not run: the run was interrupted first");
    }
  }
}

TEST(Cli, SignalsDuringMeasurementEndTheRunWithinTwoSeconds) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  const auto r = run_process(tiny_run(path, {"--strategy", "single,dp", "--steps", "1000000", "--parity-steps", "0"}),
                             /*kill_after_ms=*/2000, {}, SIGTERM);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(r.seconds_after_signal, 2.0);
  EXPECT_FALSE(json::parse(read_text(path))["context"]["ddpbench"]["complete"].get<bool>());
}

TEST(Cli, InterruptKeepsMeasuredRepetitions) {
  ScratchDir dir;
  const auto path = dir.file("results.json");
  const pid_t pid = start_long_run(path);
  // Wait until some repetitions are in the file, then interrupt.
  for (int i = 0; i < 600; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (path_exists(path) && read_text(path).find("\"iteration\"") != std::string::npos) break;
  }
  ::kill(pid, SIGINT);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 130);
  const json doc = json::parse(read_text(path));
  EXPECT_FALSE(doc["context"]["ddpbench"]["complete"].get<bool>());
  EXPECT_TRUE(doc["context"]["ddpbench"].contains("interruption"));
  int iterations = 0;
  for (const auto& b : doc["benchmarks"]) iterations += b["run_type"] == "iteration";
  EXPECT_GE(iterations, 1);
}

}  // namespace
}  // namespace ddpbench
