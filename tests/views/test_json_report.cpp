// The JSON view end to end: the golden shape, the contract's values, the dtype and peak, the step
// distribution in the median aggregate, and a killed run that leaves no truncated document.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tests/support/test_support.h"
#include "views/comm_json.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::ddpbench_args;
using testing::directory_entries;
using testing::path_exists;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;
using testing::tiny_run;

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

TEST(JsonReport, JsonMatchesTheGoldenShape) {
  const json doc = tiny_results({"--strategy", "all", "--workload", "mlp"});
  const std::string golden_path = std::string(DDPBENCH_SOURCE_DIR) + "/tests/golden/json_shape.txt";
  const std::string shape = shape_text(doc);
  if (std::getenv("DDPBENCH_UPDATE_GOLDEN")) {
    std::ofstream(golden_path) << shape;
    GTEST_SKIP() << "golden file rewritten: " << golden_path;
  }
  EXPECT_EQ(shape, read_text(golden_path)) << "run with DDPBENCH_UPDATE_GOLDEN=1 to accept a deliberate change";
}

TEST(JsonReport, JsonHoldsTheContractsValues) {
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

TEST(JsonReport, Bf16RunSaysItsDtypeAndReadsItsTflopsAgainstTheGivenPeak) {
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

TEST(JsonReport, CpuRunHasNoPeakUnlessGivenOne) {
  const json doc = tiny_results({"--strategy", "single", "--workload", "mlp"});
  EXPECT_EQ(doc["context"]["ddpbench"]["settings"]["dtype"], "fp32");
  for (const auto& b : doc["benchmarks"]) {
    EXPECT_TRUE(b["ddpbench"]["compute"]["peak_tflops"].is_null());
    EXPECT_TRUE(b["ddpbench"]["compute"]["fraction_of_peak"].is_null());
  }
}

TEST(JsonReport, MedianAggregateCarriesTheStepDistribution) {
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

TEST(JsonReport, KilledRunLeavesNoTruncatedJson) {
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

// Collective times the host did not wait for (NCCL's stream waits) would be launch times: the
// JSON says null for them and gives a bucket no collective time, where the measured ones are numbers.
TEST(JsonReport, CollectiveTimesTheHostDidNotWaitForAreNull) {
  CommSummary comm;
  comm.backend = "nccl";
  comm.world_size = 2;
  comm.bytes_per_step = 1000000;
  comm.allreduce_seconds_per_step = 1e-3;
  comm.reduce_scatter_seconds_per_step = 2e-3;
  comm.all_gather_seconds_per_step = 3e-3;
  comm.bucket_timeline = {{1000000, 0.5e-3, 1e-3}};
  const json timed = comm_json(comm);
  EXPECT_DOUBLE_EQ(timed.at("allreduce_ms").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(timed.at("all_gather_ms").get<double>(), 3.0);
  EXPECT_DOUBLE_EQ(timed.at("busbw_gbps").get<double>(), 1.0);
  EXPECT_DOUBLE_EQ(timed.at("bucket_timeline").at(0).at("allreduce_ms").get<double>(), 1.0);
  comm.collective_seconds_measured = false;
  const json launched = comm_json(comm);
  for (const char* key : {"allreduce_ms", "reduce_scatter_ms", "all_gather_ms", "busbw_gbps"}) {
    EXPECT_TRUE(launched.at(key).is_null()) << key << ": " << launched.dump();
  }
  const auto& bucket = launched.at("bucket_timeline").at(0);
  EXPECT_FALSE(bucket.contains("allreduce_ms")) << bucket.dump();
  EXPECT_DOUBLE_EQ(bucket.at("ready_ms").get<double>(), 0.5);
  EXPECT_EQ(launched.at("bytes_per_step"), 1000000);
}

}  // namespace
}  // namespace ddpbench
