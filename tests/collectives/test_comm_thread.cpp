// The communication thread the sharded buckets post their collectives to: jobs in posting order on
// one other thread, drain() as the barrier, the first failure reported once and what was queued
// after it dropped (its collectives could no longer match the other ranks').
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include "collectives/comm_thread.h"

namespace ddpbench {
namespace {

TEST(CommThread, RunsJobsInPostingOrderOnOneOtherThread) {
  CommThread comm;
  std::vector<int> order;  // touched only by the comm thread until drain() returns
  std::vector<std::thread::id> threads;
  for (int k = 0; k < 50; ++k) {
    comm.post([&, k] {
      if (k == 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the rest queue up behind it
      order.push_back(k);
      threads.push_back(std::this_thread::get_id());
    });
  }
  comm.drain();
  ASSERT_EQ(order.size(), 50u);
  for (int k = 0; k < 50; ++k) EXPECT_EQ(order[static_cast<std::size_t>(k)], k);
  for (const auto& id : threads) {
    EXPECT_EQ(id, threads.front());
    EXPECT_NE(id, std::this_thread::get_id());
  }
}

TEST(CommThread, DrainWaitsForTheJobRunningNow) {
  CommThread comm;
  std::atomic<bool> finished{false};
  comm.post([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    finished = true;
  });
  comm.drain();
  EXPECT_TRUE(finished);
}

TEST(CommThread, TheFirstFailureIsRethrownOnceAndTheJobsQueuedBehindItAreDropped) {
  CommThread comm;
  std::atomic<int> ran_after{0};
  comm.post([] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    throw std::runtime_error("all-gather of bucket 3: rank 1 went away");
  });
  comm.post([] { throw std::runtime_error("a second failure, never reported"); });
  comm.post([&] { ++ran_after; });
  try {
    comm.drain();
    ADD_FAILURE() << "the failure was not reported";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "all-gather of bucket 3: rank 1 went away");
  }
  EXPECT_EQ(ran_after, 0);
  // Reported once; the thread takes new jobs afterwards (the next step's).
  comm.post([&] { ++ran_after; });
  EXPECT_NO_THROW(comm.drain());
  EXPECT_EQ(ran_after, 1);
}

TEST(CommThread, InlineJobsRunOnThePostingThreadWithTheSameFailureRules) {
  CommThread comm(/*inline_jobs=*/true);
  std::thread::id ran_on;
  comm.post([&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  int ran_after = 0;
  comm.post([] { throw std::runtime_error("reduce-scatter failed"); });
  comm.post([&] { ++ran_after; });
  EXPECT_THROW(comm.drain(), std::runtime_error);
  EXPECT_EQ(ran_after, 0);
}

TEST(CommThread, DestructionRunsWhatIsStillQueued) {
  std::atomic<int> ran{0};
  {
    CommThread comm;
    for (int k = 0; k < 5; ++k) comm.post([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++ran;
    });
  }
  EXPECT_EQ(ran, 5);
}

}  // namespace
}  // namespace ddpbench
