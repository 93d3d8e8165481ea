// Sampling: adaptive repetitions until the target precision, unresolved at --max-time, a fixed
// count with --repetitions alone, the noise floor, and the injected slowdown a CI gate is tested with.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/stats.h"
#include "run/sampling.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;
using testing::adaptive_run;
using testing::median_entry;
using testing::run_with_json;

// ---- SamplingPlan on its own: repetitions made of chosen step times ---------------------------

// A repetition whose four steps take `seconds` each (its lower quartile is `seconds`).
RepetitionRecord repetition_of(double seconds) {
  RepetitionRecord r;
  r.step_seconds = {seconds, seconds, seconds, seconds};
  return r;
}

RunnerOptions sampling_options(int repetitions, double target, double min_time, double max_time) {
  RunnerOptions o;
  o.repetitions = repetitions;
  o.target_precision = target;
  o.min_time_seconds = min_time;
  o.max_time_seconds = max_time;
  return o;
}

TEST(SamplingPlan, AFixedCountTakesExactlyThatManyRoundsAndNeverSettlesACase) {
  const SamplingPlan plan(sampling_options(3, 0, 0, 0));
  EXPECT_TRUE(plan.wants_repetition(0));
  EXPECT_TRUE(plan.wants_repetition(2));
  EXPECT_FALSE(plan.wants_repetition(3));
  CaseRecord c;
  c.repetitions = {repetition_of(0.10), repetition_of(0.11)};
  EXPECT_FALSE(plan.settle(c));  // wants_repetition alone decides
  ASSERT_TRUE(c.achieved_precision.has_value());  // yet the precision reached is recorded
  EXPECT_NEAR(*c.achieved_precision, *stats::relative_ci95_half_width({0.10, 0.11}), 1e-12);
  EXPECT_FALSE(c.unresolved);
}

TEST(SamplingPlan, AdaptiveSamplingSettlesOnceTheIntervalIsWithinTheTargetAndNoSooner) {
  const SamplingPlan plan(sampling_options(3, 0.05, 0, 60));
  EXPECT_TRUE(plan.wants_repetition(SamplingPlan::kMaxAdaptiveRepetitions - 1));
  EXPECT_FALSE(plan.wants_repetition(SamplingPlan::kMaxAdaptiveRepetitions));
  CaseRecord c;
  c.repetitions = {repetition_of(0.100), repetition_of(0.101)};
  EXPECT_FALSE(plan.settle(c)) << "fewer repetitions than --repetitions";
  c.repetitions.push_back(repetition_of(0.100));
  ASSERT_TRUE(plan.settle(c)) << *c.achieved_precision;
  EXPECT_LE(*c.achieved_precision, 0.05);
  EXPECT_FALSE(c.unresolved);

  CaseRecord noisy;
  noisy.repetitions = {repetition_of(0.1), repetition_of(0.2), repetition_of(0.3)};
  EXPECT_FALSE(plan.settle(noisy));
  EXPECT_GT(*noisy.achieved_precision, 0.05);
  EXPECT_FALSE(noisy.unresolved);
}

TEST(SamplingPlan, MinTimeHoldsAPreciseCaseBackAndMaxTimeStopsANoisyOneUnresolved) {
  CaseRecord precise;
  precise.repetitions = {repetition_of(0.1), repetition_of(0.1), repetition_of(0.1)};  // 1.2 s measured
  EXPECT_FALSE(SamplingPlan(sampling_options(3, 0.05, 2.0, 60)).settle(precise));
  EXPECT_TRUE(SamplingPlan(sampling_options(3, 0.05, 1.0, 60)).settle(precise));

  CaseRecord noisy;
  noisy.repetitions = {repetition_of(0.1), repetition_of(0.2), repetition_of(0.3)};
  const SamplingPlan plan(sampling_options(3, 0.05, 0, 20));
  noisy.seconds_spent = 19.9;
  EXPECT_FALSE(plan.settle(noisy));
  noisy.seconds_spent = 20;
  EXPECT_TRUE(plan.settle(noisy));
  EXPECT_TRUE(noisy.unresolved);
}

// ---- through the ddpbench executable ------------------------------------------------------------

TEST(Sampling, AdaptiveSamplingStopsACaseOnceItsIntervalIsWithinTheTarget) {
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

TEST(Sampling, ACaseThatRunsOutOfTimeIsMarkedUnresolvedWithWhatItAchieved) {
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

TEST(Sampling, RepetitionsAloneMeanExactlyThatMany) {
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

TEST(Sampling, TheNoiseFloorIsSinglesSpreadAndEveryCaseIsReadAgainstIt) {
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

TEST(Sampling, SlowBySleepsInsideEveryStep) {
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

}  // namespace
}  // namespace ddpbench
