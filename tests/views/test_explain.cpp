#include <gtest/gtest.h>

#include "views/explain.h"

namespace ddpbench {
namespace {

// A measured case with the given step time and phase times (seconds), one repetition.
CaseRecord make_case(const std::string& strategy, int world, double step, std::vector<std::pair<Phase, double>> phases) {
  CaseRecord c;
  c.spec = {"wide-logits", strategy, world, 256};
  RepetitionRecord r;
  r.step_seconds = {step, step};
  for (const auto& [p, s] : phases) r.phase_seconds[static_cast<int>(p)] = s;
  c.repetitions.push_back(r);
  return c;
}

TEST(Explain, NamesTheFastestAndTheLargestExtraCostOfEachOther) {
  RunRecord record;
  record.cases.push_back(make_case("single", 1, 1.0, {{Phase::Forward, 0.33}, {Phase::Backward, 0.64}}));
  record.cases.push_back(
      make_case("dp", 2, 0.67, {{Phase::Forward, 0.17}, {Phase::GatherLoss, 0.04}, {Phase::Backward, 0.40}}));
  record.cases.push_back(
      make_case("dp-loss-in-model", 2, 0.58, {{Phase::Forward, 0.18}, {Phase::GatherLoss, 0.0}, {Phase::Backward, 0.34}}));
  CaseRecord skipped;
  skipped.spec = {"wide-logits", "ddp", 2, 256};
  skipped.status = CaseStatus::Skipped;
  record.cases.push_back(skipped);

  const auto why = explain(record);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].fastest, "wide-logits/dp-loss-in-model/world:2");
  ASSERT_EQ(why[0].lines.size(), 3u);  // the skipped case has nothing to explain
  EXPECT_NE(why[0].lines[0].find("is fastest"), std::string::npos);
  // dp: backward is 60 ms over the fastest's, gather_loss 40 ms: backward is named.
  EXPECT_EQ(why[0].lines[1].rfind("wide-logits/dp/world:2: 0.87x", 0), 0u) << why[0].lines[1];
  EXPECT_NE(why[0].lines[1].find("most extra time in backward: 400.0 ms against 340.0 ms (60% of its step)"),
            std::string::npos)
      << why[0].lines[1];
  // single: backward again (300 ms more), ahead of forward (150 ms more).
  EXPECT_NE(why[0].lines[2].find("single/world:1: 0.58x"), std::string::npos) << why[0].lines[2];
  EXPECT_NE(why[0].lines[2].find("in backward"), std::string::npos) << why[0].lines[2];
}

TEST(Explain, AFailedCaseIsNeverRankedWhateverItKept) {
  RunRecord record;
  record.cases.push_back(make_case("single", 1, 1.0, {{Phase::Backward, 0.6}}));
  // Failed in its third repetition after two fast ones: those are partial, not a result.
  CaseRecord failed = make_case("ddp", 2, 0.1, {{Phase::Backward, 0.05}});
  failed.status = CaseStatus::Failed;
  failed.reason = "rank 1 exited: signal 9";
  record.cases.push_back(failed);
  CaseRecord not_run = make_case("dp", 2, 0.05, {});
  not_run.repetitions.clear();
  not_run.status = CaseStatus::NotRun;
  record.cases.push_back(not_run);
  const auto why = explain(record);
  ASSERT_EQ(why.size(), 1u);
  EXPECT_EQ(why[0].fastest, "wide-logits/single/world:1");
  EXPECT_EQ(why[0].lines.size(), 1u);
}

TEST(Explain, NothingMeasuredNothingToSay) {
  RunRecord record;
  CaseRecord skipped;
  skipped.spec = {"mlp", "ddp", 2, 128};
  skipped.status = CaseStatus::Skipped;
  record.cases.push_back(skipped);
  EXPECT_TRUE(explain(record).empty());
}

}  // namespace
}  // namespace ddpbench
