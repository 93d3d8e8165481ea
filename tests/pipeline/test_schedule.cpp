// Pipeline schedules as data: each rank runs every micro-batch's forward and backward through each
// of its chunks once; every schedule finishes (no rank waits on a rank that waits on it) at p = 2,
// 3, 4 and several m; with equal stages the timeline's bubble is the schedule's formula; 1F1B holds
// at most p - r micro-batches in flight on rank r where GPipe holds m; bad shapes name their flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

#include "pipeline/schedule.h"

namespace ddpbench::pipeline {
namespace {

constexpr ScheduleKind kAll[] = {ScheduleKind::Naive, ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                                 ScheduleKind::Interleaved1F1B};

// Shapes each schedule takes at p ranks: naive one batch; interleaved 2 or 3 chunks and m a multiple of p.
std::vector<PipelineShape> shapes_for(ScheduleKind kind, int p) {
  std::vector<PipelineShape> out;
  if (kind == ScheduleKind::Naive) return {{p, 1, 1}};
  if (kind == ScheduleKind::Interleaved1F1B) {
    for (const int v : {2, 3})
      for (const int groups : {1, 2, 3}) out.push_back({p, groups * p, v});
    return out;
  }
  for (const int m : {1, 2, 3, 4, 5, 8, 12}) out.push_back({p, m, 1});
  return out;
}

std::string describe(ScheduleKind kind, const PipelineShape& s) {
  return std::string(to_string(kind)) + " p=" + std::to_string(s.ranks) + " m=" + std::to_string(s.microbatches) +
         " V=" + std::to_string(s.chunks_per_rank);
}

TEST(PipelineSchedule, NamesRoundTripAndAnUnknownOneIsNone) {
  for (const auto kind : kAll) EXPECT_EQ(parse_schedule(to_string(kind)), kind);
  EXPECT_FALSE(parse_schedule("zb-h1").has_value());
  EXPECT_FALSE(parse_schedule("1F1B").has_value());
}

TEST(PipelineSchedule, EachRankRunsEveryForwardAndBackwardOfItsChunksOnceAndEachBackwardAfterItsForward) {
  for (const auto kind : kAll) {
    for (const int p : {2, 3, 4}) {
      for (const auto& s : shapes_for(kind, p)) {
        SCOPED_TRACE(describe(kind, s));
        for (int r = 0; r < p; ++r) {
          const auto actions = rank_actions(kind, s, r);
          ASSERT_EQ(actions.size(), static_cast<std::size_t>(2 * s.microbatches * s.chunks_per_rank));
          std::set<std::tuple<int, int, int>> seen;
          for (std::size_t i = 0; i < actions.size(); ++i) {
            const auto& a = actions[i];
            ASSERT_GE(a.chunk, 0);
            ASSERT_LT(a.chunk, s.chunks_per_rank);
            const bool fwd = a.kind == Action::Kind::Forward;
            EXPECT_TRUE(seen.insert({fwd, a.microbatch, a.chunk}).second) << "twice: action " << i;
            if (!fwd) {
              EXPECT_TRUE(seen.count({true, a.microbatch, a.chunk})) << "backward before its forward: " << i;
            }
          }
        }
      }
    }
  }
}

TEST(PipelineSchedule, EveryScheduleFinishesAndWithEqualStagesLeavesTheBubbleOfItsFormula) {
  for (const auto kind : kAll) {
    for (const int p : {2, 3, 4}) {
      for (const auto& s : shapes_for(kind, p)) {
        SCOPED_TRACE(describe(kind, s));
        // A stage's backward twice its forward, as for a linear layer; an interleaved chunk is
        // 1/V of a rank's layers, so 1/V of their time.
        const double v = s.chunks_per_rank;
        const auto t = simulate(kind, s, 1.0 / v, 2.0 / v);
        EXPECT_NEAR(t.bubble(), expected_bubble(kind, s), 1e-12);
        for (int r = 0; r < p; ++r) EXPECT_NEAR(t.busy_seconds[r], 3.0 * s.microbatches, 1e-9);
      }
    }
  }
}

TEST(PipelineSchedule, OneFOneBHoldsAtMostPMinusRMicrobatchesWhereGPipeHoldsThemAll) {
  for (const int p : {2, 3, 4}) {
    const PipelineShape s{p, 8, 1};
    const auto gpipe = simulate(ScheduleKind::GPipe, s, 1, 2);
    const auto ofob = simulate(ScheduleKind::OneFOneB, s, 1, 2);
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(gpipe.peak_in_flight[r], 8) << "rank " << r;
      EXPECT_EQ(ofob.peak_in_flight[r], p - r) << "rank " << r;
    }
    // The same bubble, with a fraction of the activations.
    EXPECT_NEAR(gpipe.bubble(), ofob.bubble(), 1e-12);
  }
}

TEST(PipelineSchedule, InterleavingShrinksTheBubbleByTheChunksARankHolds) {
  const PipelineShape plain{4, 8, 1}, two{4, 8, 2};
  const double one = simulate(ScheduleKind::OneFOneB, plain, 1, 2).bubble();
  const double interleaved = simulate(ScheduleKind::Interleaved1F1B, two, 0.5, 1).bubble();
  EXPECT_NEAR(one, 3.0 / 11, 1e-12);
  EXPECT_NEAR(interleaved, 3.0 / 19, 1e-12);
  // Megatron's warm-up: rank r runs 2 (p - r - 1) + (V - 1) p chunk forwards before its first
  // backward (the slack that lets sends land while the next rank computes), so rank 0 holds 11 of
  // its 16 chunk activations at once, each a chunk of half its layers: 5.5 micro-batches' worth.
  const auto timeline = simulate(ScheduleKind::Interleaved1F1B, two, 0.5, 1);
  EXPECT_EQ(timeline.peak_in_flight[0], 2 * 3 + 1 * 4 + 1);
  EXPECT_EQ(timeline.peak_in_flight[3], 0 + 1 * 4 + 1);
}

TEST(PipelineSchedule, ANaiveScheduleHasOneStageBusyAtATime) {
  const auto t = simulate(ScheduleKind::Naive, {4, 1, 1}, 1, 2);
  EXPECT_DOUBLE_EQ(t.step_seconds, 4 * 3.0);
  EXPECT_NEAR(t.bubble(), 0.75, 1e-12);
}

TEST(PipelineSchedule, AShapeASchedulesCannotTakeNamesTheFlag) {
  const auto why = [](ScheduleKind k, PipelineShape s) { return invalid_shape(k, s).value_or(""); };
  EXPECT_NE(why(ScheduleKind::Naive, {2, 4, 1}).find("--microbatches does not apply"), std::string::npos);
  EXPECT_NE(why(ScheduleKind::Interleaved1F1B, {2, 4, 1}).find("--stages-per-rank 2 or more"), std::string::npos);
  EXPECT_NE(why(ScheduleKind::Interleaved1F1B, {4, 6, 2}).find("--microbatches 6 is not a multiple"),
            std::string::npos);
  EXPECT_NE(why(ScheduleKind::OneFOneB, {2, 4, 2}).find("--stages-per-rank applies to"), std::string::npos);
  EXPECT_NE(why(ScheduleKind::GPipe, {2, 0, 1}).find("at least 1"), std::string::npos);
  EXPECT_FALSE(invalid_shape(ScheduleKind::OneFOneB, {4, 3, 1}).has_value()) << "fewer micro-batches than ranks runs";
  EXPECT_THROW(rank_actions(ScheduleKind::Naive, {2, 4, 1}, 0), std::invalid_argument);
  EXPECT_THROW(rank_actions(ScheduleKind::GPipe, {2, 4, 1}, 2), std::invalid_argument);
}

}  // namespace
}  // namespace ddpbench::pipeline
