// TraceRecorder: the --trace files, and the events other processes on this host hand back to it.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <map>
#include <thread>

#include "timing/trace.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using Clock = TraceRecorder::Clock;
using std::chrono::microseconds;
using testing::ScratchDir;

TEST(TraceRecorder, MergedEventsKeepTheirTimesOnTheSameTimeline) {
  TraceRecorder parent(0, 1);
  const auto t0 = Clock::now();
  parent.set_context("mlp/single/world:1", 0);
  parent.record("step", t0, t0 + microseconds(100), 5);

  // "Another process": its own recorder, its events from two threads, encoded and merged.
  TraceRecorder other(0, 1);
  other.record("step", t0 + microseconds(200), t0 + microseconds(500), 7);
  std::thread([&] { other.record("allreduce", t0 + microseconds(300), t0 + microseconds(450), 7); }).join();
  parent.set_context("mlp/ddp/world:2", 1);
  parent.merge(other.encode(), 1, "ddp rank 1 process");

  const auto own = testing::read_trace_text(parent.to_json(0));
  ASSERT_EQ(own.events.size(), 1u);
  const auto merged = testing::read_trace_text(parent.to_json(1));
  ASSERT_EQ(merged.events.size(), 2u);
  EXPECT_EQ(merged.doc["distributedInfo"]["rank"], 1);
  EXPECT_EQ(merged.doc["distributedInfo"]["world_size"], 2);
  const auto& step = merged.events[0];
  const auto& allreduce = merged.events[1];
  // Both files count from the parent's origin: 200 µs after the parent's own step began.
  EXPECT_EQ(step["ts"].get<long>() - own.events[0]["ts"].get<long>(), 200);
  EXPECT_EQ(step["dur"], 300);
  EXPECT_EQ(allreduce["dur"], 150);
  EXPECT_EQ(step["args"]["case"], "mlp/ddp/world:2");
  EXPECT_EQ(step["args"]["repetition"], 1);
  EXPECT_EQ(step["args"]["step"], 7);
  EXPECT_NE(step["tid"], allreduce["tid"]);
  EXPECT_EQ(merged.row_names.at(step["tid"].get<int>()), "ddp rank 1 process");
  EXPECT_EQ(merged.row_names.at(allreduce["tid"].get<int>()), "ddp rank 1 process thread 1");
}

TEST(TraceRecorder, AsyncRangesAreBeginEndPairsThatSurviveAMerge) {
  TraceRecorder parent(0, 1);
  TraceRecorder rank(0, 1);
  const auto t = Clock::now();
  // Two collectives in flight at once: they overlap without nesting.
  rank.record_async("allreduce", t, t + microseconds(40), 3);
  rank.record_async("allreduce", t + microseconds(10), t + microseconds(60), 3);
  parent.merge(rank.encode(), 0, "ddp rank 0 process");
  const auto doc = nlohmann::json::parse(parent.to_json(0));
  std::map<int, std::vector<nlohmann::json>> by_id;
  for (const auto& e : doc["traceEvents"]) {
    EXPECT_NE(e["ph"], "X") << e.dump();
    if (e["ph"] == "b" || e["ph"] == "e") by_id[e["id"].get<int>()].push_back(e);
  }
  ASSERT_EQ(by_id.size(), 2u);
  for (const auto& [id, pair] : by_id) {
    ASSERT_EQ(pair.size(), 2u) << id;
    EXPECT_EQ(pair[0]["ph"], "b");
    EXPECT_EQ(pair[1]["ph"], "e");
    EXPECT_EQ(pair[0]["cat"], "comm");
    EXPECT_EQ(pair[0]["args"]["step"], 3);
  }
  const auto file = testing::read_trace_text(parent.to_json(0));
  ASSERT_EQ(file.events.size(), 2u);
  EXPECT_EQ(file.events[0]["dur"], 40);
  EXPECT_EQ(file.events[1]["dur"], 50);
  EXPECT_EQ(file.events[1]["ts"].get<long>() - file.events[0]["ts"].get<long>(), 10);
}

TEST(TraceRecorder, RecordersStartedAtDifferentTimesShareOneTimeAxis) {
  // As two torchrun ranks would: each its own recorder, started apart, each writing its own file.
  TraceRecorder early(0, 2);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  TraceRecorder late(1, 2);
  const auto t = Clock::now();
  early.record("step", t, t + microseconds(10), 0);
  late.record("step", t, t + microseconds(10), 0);
  const long ts0 = testing::read_trace_text(early.to_json(0)).events.at(0)["ts"].get<long>();
  const long ts1 = testing::read_trace_text(late.to_json(1)).events.at(0)["ts"].get<long>();
  EXPECT_LE(std::abs(ts0 - ts1), 50) << "the same instant, in microseconds";
  // Microseconds since the Unix epoch.
  const long now_us = std::chrono::duration_cast<microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  EXPECT_LE(std::abs(now_us - ts0), 1000000);
}

TEST(TraceRecorder, LaterMergesFromTheSameProcessLabelShareItsRows) {
  TraceRecorder parent(0, 1);
  for (int task = 0; task < 3; ++task) {
    TraceRecorder rank(0, 1);
    const auto t = Clock::now();
    rank.record("step", t, t + microseconds(10), task);
    parent.merge(rank.encode(), 0, "ddp rank 0 process");
  }
  const auto file = testing::read_trace_text(parent.to_json(0));
  ASSERT_EQ(file.events.size(), 3u);
  for (const auto& e : file.events) EXPECT_EQ(e["tid"], file.events[0]["tid"]);
  EXPECT_EQ(file.row_names.size(), 1u);
}

TEST(TraceRecorder, EncodeThenClearStartsAfresh) {
  TraceRecorder r(0, 1);
  const auto t = Clock::now();
  r.record("forward", t, t + microseconds(5), 1);
  EXPECT_NE(r.encode(), "");
  r.clear();
  EXPECT_EQ(r.encode(), "");
  EXPECT_EQ(r.size(), 0u);
}

TEST(TraceRecorder, MalformedEventsNameTheirProcess) {
  TraceRecorder r(0, 1);
  try {
    r.merge("step 10 20 0 1\nstep 10 oops 0 1\n", 1, "ddp rank 1 process");
    FAIL() << "accepted malformed events";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("ddp rank 1 process"), std::string::npos) << e.what();
  }
  EXPECT_THROW(r.merge("step 20 10 0 1\n", 1, "x"), std::runtime_error);  // ends before it starts
  EXPECT_EQ(r.size(), 0u) << "nothing of a malformed merge is kept";
}

TEST(TraceRecorder, WritesOneFilePerRankOwnRankFirst) {
  ScratchDir dir;
  TraceRecorder parent(0, 1);
  TraceRecorder rank2(2, 3);
  const auto t = Clock::now();
  rank2.record("step", t, t + microseconds(10), 0);
  parent.merge(rank2.encode(), 2, "ddp rank 2 process");
  const auto paths = parent.write(dir.path());
  ASSERT_EQ(paths.size(), 2u);
  EXPECT_EQ(paths[0], dir.file("ddpbench-rank0.json"));
  EXPECT_EQ(paths[1], dir.file("ddpbench-rank2.json"));
  const auto two = testing::read_trace(paths[1]);
  EXPECT_EQ(two.doc["distributedInfo"]["rank"], 2);
  EXPECT_EQ(two.doc["distributedInfo"]["world_size"], 3);
  EXPECT_EQ(two.events.size(), 1u);
}

using nlohmann::json;
using testing::run_process;
using testing::tiny_run;

TEST(TraceFiles, TraceHasEveryMeasuredStepWithItsPhasesNestedInside) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single,dp", "--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto trace = testing::read_trace(dir.file("ddpbench-rank0.json"));  // one file for the one rank
  EXPECT_EQ(trace.doc["distributedInfo"]["rank"], 0);
  std::vector<json> steps, phases;
  for (const auto& e : trace.events) (e["name"] == "step" ? steps : phases).push_back(e);
  EXPECT_EQ(steps.size(), 2u * 2u * 2u);  // 2 cases x 2 repetitions x 2 measured steps
  std::set<std::string> names;
  for (const auto& p : phases) {
    names.insert(p["name"].get<std::string>());
    // Each phase lies inside the step of the same case, repetition and step number.
    EXPECT_TRUE(std::any_of(steps.begin(), steps.end(), [&](const json& s) {
      return s["args"] == p["args"] && s["tid"] == p["tid"] && testing::within(p, s);
    })) << p.dump();
  }
  for (const char* n : {"data", "forward", "backward", "optimizer", "replicate", "scatter", "gather_loss", "reduce"}) {
    EXPECT_TRUE(names.count(n)) << n;
  }
}

}  // namespace
}  // namespace ddpbench
