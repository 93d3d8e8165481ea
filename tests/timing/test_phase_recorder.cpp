// The phase recorder's own rules: a scope opened inside another counts its time as its own, so the
// phases of a step stay exclusive and add up to no more than the step (fsdp waits for an
// all-gather inside forward).
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "timing/phase_recorder.h"

namespace ddpbench {
namespace {

void sleep_ms(int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); }

TEST(PhaseRecorder, AScopeInsideAnotherIsTakenOutOfTheEnclosingPhase) {
  PhaseRecorder phases;
  phases.begin_step();
  const auto start = std::chrono::steady_clock::now();
  {
    auto forward = phases.scope(Phase::Forward);
    sleep_ms(30);
    {
      auto wait = phases.scope(Phase::AllGatherExposed);
      sleep_ms(60);
    }
    sleep_ms(30);
  }
  const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  phases.end_step();
  const auto& s = phases.step_seconds();
  const double forward = s[static_cast<int>(Phase::Forward)], gather = s[static_cast<int>(Phase::AllGatherExposed)];
  EXPECT_GE(gather, 0.060);
  EXPECT_GE(forward, 0.060);
  EXPECT_LT(forward, whole - gather + 1e-9) << "the wait counted in forward as well";
  EXPECT_NEAR(forward + gather, whole, 0.005);
  EXPECT_TRUE(phases.used(Phase::AllGatherExposed));
}

TEST(PhaseRecorder, ScopesOneAfterAnotherAreEachTheirOwnTime) {
  PhaseRecorder phases;
  phases.begin_step();
  {
    auto forward = phases.scope(Phase::Forward);
    sleep_ms(20);
  }
  {
    auto backward = phases.scope(Phase::Backward);
    sleep_ms(40);
  }
  phases.end_step();
  const auto& s = phases.step_seconds();
  EXPECT_GE(s[static_cast<int>(Phase::Forward)], 0.020);
  EXPECT_LT(s[static_cast<int>(Phase::Forward)], 0.040) << "the second scope was counted into the first";
  EXPECT_GE(s[static_cast<int>(Phase::Backward)], 0.040);
}

}  // namespace
}  // namespace ddpbench
