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

// A case with the given peaks per device and, for a sharded one, reduce-scattered bytes.
CaseRecord with_memory(CaseRecord c, std::vector<std::optional<std::int64_t>> peaks, bool sharded) {
  for (std::size_t d = 0; d < peaks.size(); ++d) {
    DeviceMemory m;
    m.device = static_cast<int>(d);
    m.peak_allocated_bytes = peaks[d];
    c.repetitions.back().memory.push_back(m);
  }
  CommSummary comm;
  comm.world_size = static_cast<int>(peaks.size());
  if (sharded) comm.reduce_scatter_bytes_per_step = comm.all_gather_bytes_per_step = 1000;
  c.repetitions.back().comm = comm;
  return c;
}

TEST(Explain, SaysWhatEachShardedCaseSavesAndCostsAgainstDdpInTheUsersTerms) {
  RunRecord record;
  record.cases.push_back(with_memory(make_case("ddp", 2, 1.0, {{Phase::Backward, 0.6}}), {100, 100}, false));
  record.cases.push_back(with_memory(
      make_case("zero2", 2, 1.25, {{Phase::Backward, 0.6}, {Phase::ReduceScatterExposed, 0.0091},
                                   {Phase::AllGatherExposed, 0.002}}),
      {40, 42}, true));
  // At a world size ddp did not run at: what it exposed, and no comparison it cannot make.
  record.cases.push_back(with_memory(make_case("zero1", 4, 1.5, {{Phase::ReduceScatterExposed, 0.001}}), {60, 60, 60, 60}, true));
  // Memory unknown: said so, never guessed.
  record.cases.push_back(with_memory(make_case("fsdp", 2, 2.0, {{Phase::AllGatherExposed, 0.003}}), {std::nullopt, 10}, true));
  const auto why = explain(record);
  ASSERT_EQ(why.size(), 1u);
  const auto& lines = why[0].lines;
  auto line_of = [&](const std::string& prefix) {
    for (const auto& l : lines)
      if (l.rfind(prefix, 0) == 0 && l.find("exposed a step") != std::string::npos) return l;
    return std::string();
  };
  EXPECT_EQ(line_of("wide-logits/zero2/world:2"),
            "wide-logits/zero2/world:2: 0.42x ddp's memory per device at 0.80x its throughput; 9.1 ms of "
            "reduce-scatter and 2.0 ms of all-gather exposed a step");
  EXPECT_EQ(line_of("wide-logits/zero1/world:4"),
            "wide-logits/zero1/world:4: 1.0 ms of reduce-scatter and 0.0 ms of all-gather exposed a step");
  EXPECT_EQ(line_of("wide-logits/fsdp/world:2"),
            "wide-logits/fsdp/world:2: 0.50x ddp's throughput (memory per device: cannot tell); 0.0 ms of "
            "reduce-scatter and 3.0 ms of all-gather exposed a step");
  EXPECT_EQ(line_of("wide-logits/ddp/world:2"), "") << "ddp is the reference, not a sharded case";
}

// What every communicating case could not hide, and on a mesh each dimension's collectives: the
// layout's cost by the groups it runs over. A case that exposes nothing and has no mesh has no line.
TEST(Explain, SaysTheCommunicationEachCaseExposesAndOnAMeshWhatEachDimensionCarried) {
  RunRecord record;
  record.cases.push_back(make_case("single", 1, 2.0, {{Phase::Backward, 1.2}}));
  record.cases.push_back(make_case("ddp", 4, 1.0, {{Phase::Backward, 0.6}, {Phase::CommExposed, 0.1}}));
  CaseRecord mesh = make_case("tp", 4, 0.8, {{Phase::Backward, 0.4}, {Phase::CommExposed, 0.2}});
  CommSummary comm;
  comm.mesh = {{"dp", 2, 5828652, 2}, {"tp", 2, 526848, 3}};
  mesh.repetitions.back().comm = comm;
  record.cases.push_back(mesh);
  const auto why = explain(record);
  ASSERT_EQ(why.size(), 1u);
  std::vector<std::string> exposed;
  for (const auto& l : why[0].lines)
    if (l.find("of communication exposed a step") != std::string::npos) exposed.push_back(l);
  ASSERT_EQ(exposed.size(), 2u) << "single communicates nothing: no line";
  EXPECT_EQ(exposed[0],
            "wide-logits/tp/world:4: 200.0 ms of communication exposed a step (25% of it); on the mesh dp=2,tp=2, a "
            "step's collectives by dimension: dp 5.6 MiB in 2 collectives, tp 0.5 MiB in 3 collectives");
  EXPECT_EQ(exposed[1], "wide-logits/ddp/world:4: 100.0 ms of communication exposed a step (10% of it)");
}

TEST(Explain, SaysWhatCheckpointingRecomputedAndWhatActivationsForwardLeft) {
  RunRecord record;
  record.cases.push_back(make_case("single", 1, 1.0, {{Phase::Backward, 0.6}}));
  CaseRecord checkpointed = make_case("fsdp", 2, 0.8, {{Phase::Backward, 0.4}, {Phase::Recompute, 0.2}});
  DeviceMemory device0;
  device0.activation_bytes = 3 << 20;
  checkpointed.repetitions.back().memory = {device0};
  record.cases.push_back(checkpointed);
  const auto why = explain(record);
  ASSERT_EQ(why.size(), 1u);
  std::vector<std::string> recomputed;
  for (const auto& l : why[0].lines)
    if (l.find("activation checkpointing") != std::string::npos) recomputed.push_back(l);
  ASSERT_EQ(recomputed.size(), 1u) << "single recomputed nothing: no line";
  EXPECT_EQ(recomputed[0], "wide-logits/fsdp/world:2: activation checkpointing recomputed 200.0 ms a step (25% of it); "
                           "forward left 3 MiB of activations on device 0");
}

// A pipeline's line: the bubble's median over the repetitions with their range, beside the formula;
// the cut and its profile; and the rank that computes longest, by its median.
TEST(Explain, APipelinesBubbleIsTheMedianOverRepetitionsWithTheirRange) {
  RunRecord record;
  CaseRecord c;
  c.spec = {"mlp", "pp", 2, 64};
  // Rank 1 computes 1.5x rank 0's 40 ms; waits: (20/60 + 0/60) / 2 = 1/6, then 1/4 and 1/5.
  for (const double wait : {20.0, 30.0, 24.0}) {
    RepetitionRecord r;
    r.step_seconds = {0.06, 0.06};
    for (int rank = 0; rank < 2; ++rank) {
      RankRecord k;
      k.rank = rank;
      k.mean_step_seconds = 0.06;
      k.phase_seconds[static_cast<int>(Phase::PipelineWait)] = rank == 0 ? wait / 1e3 : 0.0;
      r.ranks.push_back(k);
    }
    CommSummary comm;
    CommSummary::Pipeline line;
    line.schedule = "1f1b";
    line.stages = 2;
    line.microbatches = 4;
    line.expected_bubble = 0.2;
    line.balance = "time";
    line.stage_profile_seconds = {0.010, 0.0125};
    comm.pipeline = line;
    r.comm = comm;
    c.repetitions.push_back(r);
  }
  record.cases.push_back(c);
  const auto why = explain(record);
  ASSERT_EQ(why.size(), 1u);
  std::string found;
  for (const auto& l : why[0].lines)
    if (l.rfind("mlp/pp/world:2: 1f1b", 0) == 0) found = l;
  // Rank 0 waits 24 ms (the median) and computes 36; rank 1 computes 60: 1.67x.
  EXPECT_EQ(found,
            "mlp/pp/world:2: 1f1b, 2 stages, 4 micro-batches: waiting on neighbours 20% of the step (17-25% over 3 "
            "repetitions) against 20% for equal stages; stages cut by time (profiled 10/12.5 ms a micro-batch, 1.11x the "
            "mean at most); rank 1 computes 1.67x as long as the least busy");
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
