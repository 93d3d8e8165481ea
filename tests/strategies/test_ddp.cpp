// ddp: whole runs of real rank processes: parity, SyncBatchNorm, checkpoints, traces, external
// launches (torchrun- and Slurm-style) with a killed peer, interruption and bad input. (A killed or
// hung rank of a self-launched run: test_strategies.cpp, for every strategy whose ranks are processes.)
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/functional/loss.h>
#include <torch/serialize.h>

#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <atomic>
#include <future>
#include <map>
#include <cstdio>
#include <set>
#include <sstream>
#include <thread>

#include "base/errors.h"
#include "distributed/process_group.h"
#include "distributed/rank_env.h"
#include "run/runner.h"
#include "collectives/gradient_bucketer.h"
#include "tests/support/test_support.h"
#include "workloads/workload.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::ddpbench_args;
using testing::directory_entries;
using testing::is_regular_file;
using testing::path_exists;
using testing::find_case;
using testing::read_text;
using testing::run_process;
using testing::ScratchDir;

// ---- whole runs of real rank processes ------------------------------------------------------

std::vector<std::string> ddp_run(const std::string& json_path, std::vector<std::string> extra) {
  return testing::ddpbench_run({{"--device", "cpu"}, {"--steps", "3"}, {"--warmup", "1"}, {"--repetitions", "1"},
                                {"--workload", "mlp"}, {"--batch", "12"}, {"--dataset-size", "48"}, {"--timeout", "20"}},
                               json_path, std::move(extra));
}

class DdpParity : public ::testing::TestWithParam<int> {};

TEST_P(DdpParity, MatchesSingleOnMlp) {
  ScratchDir dir;
  const auto r = run_process(ddp_run(dir.file("r.json"), {"--strategy", "ddp", "--world-size", std::to_string(GetParam()),
                                                          "--parity-steps", "4"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(read_text(dir.file("r.json")));
  const auto* c = find_case(doc, "mlp/ddp/world:" + std::to_string(GetParam()));
  ASSERT_NE(c, nullptr);
  const auto& p = (*c)["ddpbench"]["parity"];
  EXPECT_EQ(p["steps"], 4);
  EXPECT_EQ(p["dtype"], "fp64");  // the ranks trained in float64 too, the all-reduce included
  EXPECT_LE(p["max_rel_param_diff"].get<double>(), 1e-9);
  EXPECT_TRUE(p["within_tolerance"].get<bool>());
  EXPECT_EQ((*c)["ddpbench"]["ranks"].size(), static_cast<size_t>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(World, DdpParity, ::testing::Values(2, 3),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// --grad-accum 4: the buckets all-reduce after the last micro-batch only (no_sync on the others),
// one step's traffic; --sync-every-microbatch all-reduces after each, four times it. Both compute
// single's steps on the whole batch (float64 parity), and the table says how each step was cut.
TEST(DdpRun, AccumulatesWithOneAllReduceAStepOrOneAMicroBatch) {
  auto run = [](const std::vector<std::string>& flags, std::string* out = nullptr) {
    ScratchDir dir;
    std::vector<std::string> args = {"--strategy", "ddp", "--workload", "mlp", "--device", "cpu", "--world-size", "2",
                                     "--batch", "16", "--dataset-size", "64", "--steps", "2", "--warmup", "1",
                                     "--repetitions", "1", "--parity-steps", "2", "--threads", "1",
                                     "--json", dir.file("r.json")};
    args.insert(args.end(), flags.begin(), flags.end());
    const auto r = run_process(ddpbench_args(args));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    if (out) *out = r.out;
    const json doc = json::parse(read_text(dir.file("r.json")));
    const json* c = find_case(doc, "mlp/ddp/world:2");
    return c ? (*c)["ddpbench"] : json();
  };
  std::string table;
  const json plain = run({}), no_sync = run({"--grad-accum", "4"}, &table),
             every = run({"--grad-accum", "4", "--sync-every-microbatch"});
  for (const json* d : {&plain, &no_sync, &every}) {
    ASSERT_EQ((*d)["status"], "ok") << (*d)["reason"];
    EXPECT_LE((*d)["parity"]["max_rel_param_diff"].get<double>(), 1e-9) << (*d)["parity"].dump();
  }
  const auto bytes = [](const json& d) { return d["comm"]["bytes_per_step"].get<double>(); };
  EXPECT_EQ(bytes(no_sync), bytes(plain));
  EXPECT_EQ(bytes(every), 4 * bytes(plain));
  EXPECT_EQ(every["comm"]["buckets"].get<int>(), 4 * plain["comm"]["buckets"].get<int>());
  EXPECT_NE(table.find("memory levers: activation checkpointing none; 4 micro-batches a step, each 1/4 of the batch"),
            std::string::npos) << table;
}

TEST(DdpRun, SyncBatchNormMatchesSingleOnConvnet) {
  ScratchDir dir;
  const auto synced = run_process(ddp_run(dir.file("s.json"), {"--strategy", "ddp", "--workload", "convnet",
                                                               "--sync-bn", "--parity-steps", "3"}));
  ASSERT_EQ(synced.exit_code, 0) << synced.err;
  const json doc = json::parse(read_text(dir.file("s.json")));
  const auto& p = (*find_case(doc, "convnet/ddp/world:2"))["ddpbench"]["parity"];
  EXPECT_TRUE(p["within_tolerance"].get<bool>()) << p.dump();

  // Without it each rank normalises its own half: measurably different, and said so.
  const auto local = run_process(ddp_run(dir.file("l.json"), {"--strategy", "ddp", "--workload", "convnet",
                                                              "--parity-steps", "3"}));
  ASSERT_EQ(local.exit_code, 0) << local.err;
  const json ldoc = json::parse(read_text(dir.file("l.json")));
  const auto& lp = (*find_case(ldoc, "convnet/ddp/world:2"))["ddpbench"]["parity"];
  EXPECT_FALSE(lp["within_tolerance"].get<bool>());
  EXPECT_GT(lp["max_rel_param_diff"].get<double>(), 10 * p["max_rel_param_diff"].get<double>());
  EXPECT_NE(lp["note"].get<std::string>().find("BatchNorm"), std::string::npos);
}

TEST(DdpRun, Rank0SavesACheckpointThatLoadsIntoThePlainModel) {
  ScratchDir dir;
  const std::string path = dir.file("model.pt");
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--checkpoint", path, "--checkpoint-every", "2"}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  auto model = WorkloadRegistry::instance().get("mlp").make_model();
  const auto initial = model->parameters()[0].clone();
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  model->load(archive);
  EXPECT_FALSE(torch::equal(model->parameters()[0], initial)) << "the checkpoint holds no trained weights";
  // Nothing half-written is left next to it.
  int files = 0;
  for (const auto& name : directory_entries(dir.path())) files += is_regular_file(dir.file(name)) ? 1 : 0;
  EXPECT_EQ(files, 1);
}

// Every bucket's all-reduce in a trace file: an async range (ranges in flight overlap) from launch
// to completion, inside the step it belongs to; at least one per measured step.
void expect_allreduces_inside_steps(const testing::TraceFile& trace, std::size_t measured_steps) {
  const auto steps = trace.events_of("mlp/ddp/world:2", "step");
  const auto allreduces = trace.events_of("mlp/ddp/world:2", "allreduce");
  EXPECT_EQ(steps.size(), measured_steps);
  EXPECT_GE(allreduces.size(), measured_steps) << "at least one bucket a step";
  for (const auto& a : allreduces) {
    EXPECT_TRUE(a.value("async", false)) << a.dump();
    EXPECT_TRUE(std::any_of(steps.begin(), steps.end(), [&](const json& s) { return s["args"] == a["args"] && testing::within(a, s); }))
        << a.dump();
  }
}

// Two ranks' trace files share one time axis: the ranks' steps run in lockstep (every step ends in
// an all-reduce both take part in), so each ddp step of rank 0 overlaps the same step of rank 1.
void expect_ranks_on_one_timeline(const testing::TraceFile& rank0, const testing::TraceFile& rank1) {
  const auto steps0 = rank0.events_of("mlp/ddp/world:2", "step"), steps1 = rank1.events_of("mlp/ddp/world:2", "step");
  ASSERT_FALSE(steps0.empty());
  for (const auto& a : steps0) {
    const auto b = std::find_if(steps1.begin(), steps1.end(), [&](const auto& s) { return s["args"] == a["args"]; });
    ASSERT_NE(b, steps1.end()) << a.dump();
    const long a_end = a["ts"].get<long>() + a["dur"].get<long>(), b_end = (*b)["ts"].get<long>() + (*b)["dur"].get<long>();
    EXPECT_LT(a["ts"].get<long>(), b_end) << a.dump() << (*b).dump();
    EXPECT_LT((*b)["ts"].get<long>(), a_end) << a.dump() << (*b).dump();
  }
}

TEST(DdpRun, TraceHasAFilePerLaunchedRankOnTheLaunchersTimeline) {
  ScratchDir dir;
  const auto r =
      run_process(ddp_run(dir.file("r.json"), {"--strategy", "single,ddp", "--repetitions", "2", "--trace", dir.path()}));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::vector<testing::TraceFile> files;
  for (int rank = 0; rank < 2; ++rank) {
    files.push_back(testing::read_trace(dir.file("ddpbench-rank" + std::to_string(rank) + ".json")));
    EXPECT_EQ(files.back().doc["distributedInfo"]["rank"], rank);
    EXPECT_EQ(files.back().doc["distributedInfo"]["world_size"], 2);
  }
  // Rank 0's file holds this process's own cases and launched rank 0's; rank 1's only its ddp.
  EXPECT_EQ(files[0].events_of("mlp/single/world:1", "step").size(), 2u * 3u);
  EXPECT_TRUE(files[1].events_of("mlp/single/world:1", "step").empty());
  for (int rank = 0; rank < 2; ++rank) {
    const auto& f = files[static_cast<size_t>(rank)];
    const auto steps = f.events_of("mlp/ddp/world:2", "step");
    ASSERT_EQ(steps.size(), 2u * 3u) << "2 repetitions x 3 measured steps, each rank process";
    const int step_row = steps[0]["tid"].get<int>();
    EXPECT_EQ(f.row_names.at(step_row), "ddp rank " + std::to_string(rank) + " process");
    // The optimizer phase is two spans a step: zero_grad as the step begins, the step at its end.
    for (const auto& [phase, per_step] : {std::pair<const char*, size_t>{"forward", 1}, {"backward", 1}, {"optimizer", 2}}) {
      const auto ranges = f.events_of("mlp/ddp/world:2", phase);
      EXPECT_EQ(ranges.size(), per_step * steps.size()) << phase;
      for (const auto& p : ranges) {
        EXPECT_TRUE(std::any_of(steps.begin(), steps.end(),
                                [&](const auto& s) { return s["args"] == p["args"] && testing::within(p, s); }))
            << p.dump();
      }
    }
    expect_allreduces_inside_steps(f, steps.size());
  }
  expect_ranks_on_one_timeline(files[0], files[1]);
  // ...and after this process's first single repetition (cases interleave: single, ddp, single, ddp).
  const auto steps0 = files[0].events_of("mlp/ddp/world:2", "step");
  const auto single = files[0].events_of("mlp/single/world:1", "step");
  EXPECT_LT(single.front()["ts"].get<long>(), steps0.front()["ts"].get<long>());
  EXPECT_NE(r.out.find("ddpbench-rank1.json"), std::string::npos) << r.out;
}

TEST(DdpRun, SigtermToTheLauncherEndsEveryRankWithinTwoSeconds) {
  ScratchDir dir;
  const auto marker = testing::unique_marker();
  // Long enough that the signal lands while the ranks train.
  const auto r = run_process(ddp_run(dir.file("r.json"), {"--strategy", "ddp", "--steps", "400"}), 3000,
                             {marker}, SIGTERM, testing::kRunHasBegun);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_LT(r.seconds_after_signal, testing::kSecondsASignalEndsARunWithin);
  EXPECT_TRUE(testing::processes_with(testing::marker_text(marker)).empty()) << "a rank outlived the launcher";
}

// torchrun-style: two processes started by someone else, joining through the environment.
std::vector<testing::ProcessResult> launch_externally(const std::vector<std::vector<std::pair<std::string, std::string>>>& envs,
                                                      const std::vector<std::vector<std::string>>& args) {
  std::vector<std::future<testing::ProcessResult>> running;
  for (size_t i = 0; i < envs.size(); ++i) {
    running.push_back(std::async(std::launch::async, [&, i] { return run_process(args[i], 0, envs[i]); }));
  }
  std::vector<testing::ProcessResult> out;
  for (auto& f : running) out.push_back(f.get());
  return out;
}

int free_port() {
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  close(s);
  return ntohs(addr.sin_port);
}

std::vector<std::pair<std::string, std::string>> rank_vars(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)}, {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_RANK", std::to_string(rank)},
          {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", std::to_string(port)}};
}

TEST(DdpExternalLaunch, TorchrunStyleRanksRunAndRank0AloneWritesTheJson) {
  ScratchDir dir;
  const int port = free_port();
  const auto results = launch_externally({rank_vars(0, 2, port), rank_vars(1, 2, port)},
                                         {ddp_run(dir.file("r0.json"), {"--strategy", "all", "--trace", dir.path()}),
                                          ddp_run(dir.file("r1.json"), {"--strategy", "all", "--trace", dir.path()})});
  ASSERT_EQ(results[0].exit_code, 0) << results[0].err;
  ASSERT_EQ(results[1].exit_code, 0) << results[1].err;
  EXPECT_FALSE(path_exists(dir.file("r1.json"))) << "only rank 0 reports";
  EXPECT_TRUE(results[1].out.empty()) << results[1].out;
  const json doc = json::parse(read_text(dir.file("r0.json")));
  const auto* ddp = find_case(doc, "mlp/ddp/world:2");
  ASSERT_NE(ddp, nullptr);
  EXPECT_EQ((*ddp)["ddpbench"]["status"], "ok") << (*ddp)["ddpbench"]["reason"];
  EXPECT_TRUE((*ddp)["ddpbench"]["parity"]["within_tolerance"].get<bool>());
  EXPECT_EQ((*ddp)["ddpbench"]["ranks"].size(), 2u);
  // One trace file per rank, each saying which rank it is.
  for (int rank = 0; rank < 2; ++rank) {
    const auto trace = testing::read_trace(dir.file("ddpbench-rank" + std::to_string(rank) + ".json"));
    EXPECT_EQ(trace.doc["distributedInfo"]["rank"], rank);
    EXPECT_EQ(trace.doc["distributedInfo"]["world_size"], 2);
    expect_allreduces_inside_steps(trace, 3);
  }
  // Each rank timed its own file, yet they share one time axis.
  expect_ranks_on_one_timeline(testing::read_trace(dir.file("ddpbench-rank0.json")),
                               testing::read_trace(dir.file("ddpbench-rank1.json")));
  // Single-process strategies are no business of a rank: skipped, with the reason.
  EXPECT_EQ((*find_case(doc, "mlp/single/world:1"))["ddpbench"]["status"], "skipped");
}

TEST(DdpExternalLaunch, RanksThatStartFromOtherWeightsFailTheCaseSayingWhichRank) {
  // Different seeds build different initial weights, as different --model files on two nodes
  // would load them: rank 0's broadcast would hide it, so the check before it names rank 1.
  ScratchDir dir;
  const int port = free_port();
  const auto results = launch_externally({rank_vars(0, 2, port), rank_vars(1, 2, port)},
                                         {ddp_run(dir.file("r0.json"), {"--strategy", "ddp", "--seed", "1"}),
                                          ddp_run(dir.file("r1.json"), {"--strategy", "ddp", "--seed", "2"})});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("rank 1 starts from other weights than rank 0"), std::string::npos) << r.err;
  }
  const json doc = json::parse(read_text(dir.file("r0.json")));
  EXPECT_EQ((*find_case(doc, "mlp/ddp/world:2"))["ddpbench"]["status"], "failed");
}

TEST(DdpExternalLaunch, InconsistentWorldSizeIsBadInputOnEveryRank) {
  const int port = free_port();
  const auto results = launch_externally({rank_vars(0, 2, port), rank_vars(1, 3, port)},
                                         {ddp_run("", {"--strategy", "ddp", "--timeout", "10"}),
                                          ddp_run("", {"--strategy", "ddp", "--timeout", "10"})});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 2) << r.err;
    EXPECT_NE(r.err.find("WORLD_SIZE="), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(DdpExternalLaunch, AdaptiveSamplingIsRefusedBecauseRanksCouldNotAgreeWhenToStop) {
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--target-precision", "0.05", "--repetitions", "3"}), 0,
                             rank_vars(0, 2, 29500));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("--target-precision: ranks that torchrun or Slurm start"), std::string::npos) << r.err;
}

TEST(DdpExternalLaunch, RankBeyondWorldSizeIsBadInput) {
  const auto r = run_process(ddp_run("", {"--strategy", "ddp"}), 0, rank_vars(2, 2, 29500));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err, "ddpbench: RANK=2 is not below WORLD_SIZE=2\n");
}

TEST(DdpExternalLaunch, TakenPortIsBadInput) {
  // Something else listens on the port rank 0 was told to host the rendezvous on.
  const int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(s, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(s, reinterpret_cast<sockaddr*>(&addr), &len);
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--timeout", "5"}), 0, rank_vars(0, 2, ntohs(addr.sin_port)));
  close(s);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("MASTER_PORT=" + std::to_string(ntohs(addr.sin_port))), std::string::npos) << r.err;
}

// A listening socket on loopback that is not a c10d store: `greeting` is what it sends to each
// connection it accepts before closing it; without one it never accepts (connections wait in its
// backlog, as with a process that listens and hangs). It lives on its own thread until destroyed.
class ForeignListener {
 public:
  explicit ForeignListener(std::string greeting) : greeting_(std::move(greeting)) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    listen(fd_, 16);
    socklen_t len = sizeof(addr);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
    if (!greeting_.empty()) {
      thread_ = std::thread([this] {
        while (!stop_) {
          pollfd p{fd_, POLLIN, 0};
          if (poll(&p, 1, 100) != 1) continue;
          const int c = accept(fd_, nullptr, nullptr);
          if (c < 0) continue;
          (void)!write(c, greeting_.data(), greeting_.size());
          close(c);
        }
      });
    }
  }
  ~ForeignListener() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    close(fd_);
  }
  int port() const { return port_; }

 private:
  std::string greeting_;
  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

TEST(DdpExternalLaunch, AListenerThatNeverAnswersIsOneLineWithinTheTimeout) {
  ForeignListener silent("");
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--timeout", "3"}), 60000, rank_vars(1, 2, silent.port()));
  ASSERT_EQ(r.signal, 0) << "still waiting after 60 s";
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(r.seconds, 3 + 2 + 3) << "--timeout 3 was not kept";
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("ddpbench: MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(silent.port()), 0), 0u) << r.err;
}

TEST(DdpExternalLaunch, AServerThatIsNotC10dIsSaidSoNotTakenForAnotherRank) {
  ForeignListener web("HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nhi");
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--timeout", "10"}), 60000, rank_vars(1, 2, web.port()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_LT(r.seconds, 5) << "a server that speaks first is known at once";
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("is not a c10d store"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("HTTP/1.0 200 OK"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("already joined"), std::string::npos) << r.err;
}

TEST(DdpExternalLaunch, AnUnknownMasterHostIsOneLineWithoutLibTorchsLogging) {
  // c10d retries the name and logs each retry (glog's W/E lines in 1.13, c10's in 2.x): none of it
  // reaches the user, whose one line says it all.
  auto vars = rank_vars(1, 2, free_port());
  for (auto& [name, value] : vars) {
    if (name == "MASTER_ADDR") value = "no.such.host.invalid";
  }
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--timeout", "30"}), 60000, vars);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_EQ(r.err.rfind("ddpbench: MASTER_ADDR=no.such.host.invalid: cannot resolve the host name", 0), 0u) << r.err;
  EXPECT_LT(r.seconds, 10) << "a name that does not resolve waited out --timeout, as if the port were to blame";
}

TEST(DdpExternalLaunch, WhenAPeerIsKilledTheSurvivorSaysWhyOnItsOwnStderr) {
  const int port = free_port();
  auto with_fault = [](std::vector<std::pair<std::string, std::string>> vars) {
    vars.push_back({"DDPBENCH_FAULT_RANK", "1:kill"});
    return vars;
  };
  const auto results = launch_externally({with_fault(rank_vars(0, 2, port)), with_fault(rank_vars(1, 2, port))},
                                         {ddp_run("", {"--strategy", "ddp", "--timeout", "10"}),
                                          ddp_run("", {"--strategy", "ddp", "--timeout", "10"})});
  EXPECT_EQ(results[1].signal, SIGKILL);
  EXPECT_EQ(results[0].exit_code, 1) << results[0].err;
  EXPECT_EQ(std::count(results[0].err.begin(), results[0].err.end(), '\n'), 1) << results[0].err;
  EXPECT_EQ(results[0].err.rfind("ddpbench: error: rank 0: mlp/ddp/world:2 failed: ", 0), 0u) << results[0].err;
}

TEST(DdpExternalLaunch, UnreachableMasterIsBadInputWithinTheTimeout) {
  const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--timeout", "3"}), 30000, rank_vars(1, 2, free_port()));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("rendezvous unreachable"), std::string::npos) << r.err;
  EXPECT_LT(r.seconds, 3 + 10);
}

// Whether a socket of this host listens on `port` (IPv4 or IPv6), read from /proc/net: a check
// that connects nothing to it.
bool listening_on(int port) {
  char local[16];
  std::snprintf(local, sizeof local, ":%04X ", port);
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::istringstream lines(testing::read_text(table));
    std::string line;
    while (std::getline(lines, line)) {
      // "sl local_address rem_address st ...": state 0A is LISTEN
      std::istringstream fields(line);
      std::string slot, local_address, remote_address, state;
      fields >> slot >> local_address >> remote_address >> state;
      if ((local_address + " ").find(local) != std::string::npos && state == "0A") return true;
    }
  }
  return false;
}

TEST(DdpExternalLaunch, ASignalWhileWaitingForTheOtherRanksEndsTheRankAtOnce) {
  // Rank 0 of two, and rank 1 never comes: the rendezvous would wait out --timeout. The signal
  // comes 0.5 s after rank 0's store listens, so it lands in the wait however slowly a loaded
  // machine starts the process (a fixed 1.5 s from exec fell before main there, in CI).
  for (int signal : {SIGINT, SIGTERM}) {
    SCOPED_TRACE(strsignal(signal));
    const int port = free_port();
    const auto r = run_process(ddp_run("", {"--strategy", "ddp", "--timeout", "60"}), /*kill_after_ms=*/500,
                               rank_vars(0, 2, port), signal, "", [port] { return listening_on(port); });
    EXPECT_EQ(r.exit_code, 130) << r.err;
    EXPECT_LT(r.seconds_after_signal, testing::kSecondsASignalEndsARunWithin);
    EXPECT_NE(r.err.find("interrupted while waiting for the other ranks to join"), std::string::npos) << r.err;
  }
}

TEST(DdpCli, DdpFlagsWithoutDdpAreBadInput) {
  const auto r = run_process(ddp_run("", {"--strategy", "single", "--bucket-mb", "4"}));
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--bucket-mb"), std::string::npos) << r.err;
  const auto bn = run_process(ddp_run("", {"--strategy", "ddp", "--sync-bn"}));  // mlp has no BatchNorm
  EXPECT_EQ(bn.exit_code, 2);
  EXPECT_NE(bn.err.find("--sync-bn"), std::string::npos) << bn.err;
  const auto every = run_process(ddp_run("", {"--strategy", "ddp", "--checkpoint-every", "2"}));
  EXPECT_EQ(every.exit_code, 2);
  EXPECT_NE(every.err.find("--checkpoint-every"), std::string::npos) << every.err;
}

}  // namespace
}  // namespace ddpbench
