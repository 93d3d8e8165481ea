// The run records' own figures: what a repetition and a case say of their step times, and what
// the collectives' times say where the host did not wait for them (NCCL), through the codec too.
#include <gtest/gtest.h>

#include <vector>

#include "records/record_codec.h"
#include "records/results.h"
#include "base/stats.h"

namespace ddpbench {
namespace {

RepetitionRecord repetition(const std::vector<double>& steps) {
  RepetitionRecord r;
  r.step_seconds = steps;
  return r;
}

TEST(RepetitionRecord, LowerQuartileIsTheInterpolatedTwentyFifthPercentile) {
  // Sorted 1..5: rank 0.25 x 4 = 1, the second value; 1..4: rank 0.75, between 1 and 2.
  EXPECT_DOUBLE_EQ(repetition({5, 1, 4, 2, 3}).lower_quartile_step_seconds(), 2.0);
  EXPECT_DOUBLE_EQ(repetition({4, 3, 2, 1}).lower_quartile_step_seconds(), 1.75);
}

TEST(CaseRecord, ASlowStretchInPartOfEachRepetitionMovesTheMeansNotTheLowerQuartiles) {
  // Steps of 50 ms, with a stretch 1.6x slower (as this project's VM has) over 0, 2 and 5 of a
  // repetition's 8 steps: the means spread by a fifth, the lower quartiles not at all.
  CaseRecord c;
  for (int slow : {0, 2, 5}) {
    std::vector<double> steps(8, 0.050);
    for (int i = 0; i < slow; ++i) steps[static_cast<size_t>(i)] = 0.080;
    c.repetitions.push_back(repetition(steps));
  }
  const std::vector<double> quartiles = c.repetition_lower_quartiles();
  ASSERT_EQ(quartiles.size(), 3u);
  for (double q : quartiles) EXPECT_DOUBLE_EQ(q, 0.050);
  EXPECT_GT(stats::cv(c.repetition_means()), 0.15);
  EXPECT_LT(stats::cv(quartiles), 1e-12);
}

TEST(CaseRecord, AStepTimeChangeOfEveryStepMovesTheLowerQuartilesByAsMuch) {
  CaseRecord base, slower;
  for (double jitter : {0.000, 0.001, 0.002}) {
    std::vector<double> steps = {0.050 + jitter, 0.052, 0.049, 0.080, 0.051, 0.050};
    base.repetitions.push_back(repetition(steps));
    for (double& s : steps) s *= 1.10;
    slower.repetitions.push_back(repetition(steps));
  }
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_NEAR(slower.repetition_lower_quartiles()[i] / base.repetition_lower_quartiles()[i], 1.10, 1e-12);
  }
}

// A 2-rank all-reduce of 1 MB a step in 1 ms: bus bandwidth 2 (n - 1) / n x bytes / seconds. The
// same seconds where the host did not wait (NCCL's stream waits) are launches: no bandwidth.
TEST(CommSummary, BusBandwidthOnlyWhereTheHostWaitedForTheCollectives) {
  CommSummary comm;
  comm.world_size = 2;
  comm.bytes_per_step = 1000000;
  comm.allreduce_seconds_per_step = 1e-3;
  ASSERT_TRUE(bus_bandwidth(comm).has_value());
  EXPECT_DOUBLE_EQ(*bus_bandwidth(comm), 1e9);
  comm.collective_seconds_measured = false;
  EXPECT_FALSE(bus_bandwidth(comm).has_value());
}

TEST(RecordCodec, ARepetitionKeepsWhetherItsCollectiveSecondsWereMeasured) {
  for (const bool measured : {true, false}) {
    RepetitionRecord r = repetition({0.5, 0.25});
    r.step_losses = {2.0, 1.5};
    CommSummary comm;
    comm.backend = "nccl";
    comm.world_size = 2;
    comm.allreduce_seconds_per_step = 0.125;
    comm.collective_seconds_measured = measured;
    r.comm = comm;
    const auto back = codec::decode_repetition(codec::encode(r));
    ASSERT_TRUE(back.comm.has_value());
    EXPECT_EQ(back.comm->collective_seconds_measured, measured);
    EXPECT_EQ(back.comm->allreduce_seconds_per_step, 0.125);
  }
}

}  // namespace
}  // namespace ddpbench
