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

}  // namespace
}  // namespace ddpbench
