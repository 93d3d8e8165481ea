#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "base/watchdog.h"

namespace ddpbench {
namespace {

using namespace std::chrono_literals;

TEST(StepWatchdog, FiresOnceWhenNoKickComesInTime) {
  std::atomic<int> fired{0};
  StepWatchdog dog(100ms, [&] { ++fired; });
  const auto start = std::chrono::steady_clock::now();
  dog.arm();
  while (fired == 0 && std::chrono::steady_clock::now() - start < 5s) std::this_thread::sleep_for(5ms);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(fired, 1);
  EXPECT_TRUE(dog.expired());
  EXPECT_GE(waited, 100ms);
  EXPECT_LT(waited, 2s);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(fired, 1);  // once
}

TEST(StepWatchdog, KicksKeepItQuietAndDisarmStopsIt) {
  std::atomic<int> fired{0};
  StepWatchdog dog(150ms, [&] { ++fired; });
  dog.arm();
  for (int i = 0; i < 20; ++i) {  // 600 ms of steady progress
    std::this_thread::sleep_for(30ms);
    dog.kick();
  }
  dog.disarm();
  std::this_thread::sleep_for(400ms);  // long past the timeout, but not armed
  EXPECT_EQ(fired, 0);
  EXPECT_FALSE(dog.expired());
}

TEST(StepWatchdog, UnarmedNeverFires) {
  std::atomic<int> fired{0};
  { StepWatchdog dog(10ms, [&] { ++fired; }); std::this_thread::sleep_for(100ms); }
  EXPECT_EQ(fired, 0);
}

TEST(StepWatchdog, AStopNotReachedWithinItsGraceFiresTheStuckStopOnce) {
  std::atomic<bool> stop{false};
  std::atomic<int> stuck{0}, hung{0};
  StepWatchdog dog(10s, [&] { ++hung; });
  dog.watch_stop([&] { return stop.load(); }, 200ms, [&] { ++stuck; });
  dog.arm();
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(stuck, 0) << "fired with no stop asked for";
  const auto asked = std::chrono::steady_clock::now();
  stop = true;
  while (stuck == 0 && std::chrono::steady_clock::now() - asked < 5s) std::this_thread::sleep_for(5ms);
  const auto waited = std::chrono::steady_clock::now() - asked;
  EXPECT_EQ(stuck, 1);
  EXPECT_GE(waited, 200ms);
  EXPECT_LT(waited, 2s);
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(stuck, 1);  // once
  EXPECT_EQ(hung, 0);   // and the hang's handler not at all
  EXPECT_TRUE(dog.expired());
}

TEST(StepWatchdog, AStopAskedForWhileDisarmedFiresNothing) {
  std::atomic<int> stuck{0};
  StepWatchdog dog(10s, [] {});
  dog.watch_stop([] { return true; }, 50ms, [&] { ++stuck; });
  dog.arm();
  dog.disarm();  // the run ended (as a stopped run does, at its step boundary) before the grace ran out
  std::this_thread::sleep_for(300ms);
  EXPECT_EQ(stuck, 0);
}

}  // namespace
}  // namespace ddpbench
