// cli/options_codec: the launcher's ranks get the resolved options whole, every flag of --help.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "base/errors.h"
#include "cli/cli.h"
#include "cli/options_codec.h"
#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;


// The record a rank would run with, for comparing: the options of `cmd` as the launcher hands them on.
std::string record_of(const CommandLine& cmd) {
  const DeviceSet devices = resolve_devices(cmd.devices);
  const auto args = rank_command_line(cmd.runner, devices, cmd.runner.workloads, cmd.runner.strategies);
  EXPECT_EQ(args.size(), 2u);
  EXPECT_EQ(args.at(0), kRankOptionsFlag);
  return args.at(1);
}

TEST(RankOptions, EveryFlagOfHelpSurvivesTheTripToARank) {
  // A value for every flag that changes what a rank runs; a flag of --help missing here fails the
  // test, so a new flag cannot be forgotten on the way to the ranks.
  const std::map<std::string, std::vector<std::string>> changes = {
      {"--strategy", {"--strategy", "ddp"}},
      {"--workload", {"--workload", "convnet"}},
      {"--world-size", {"--world-size", "3"}},
      {"--batch", {"--batch", "64"}},
      {"--seq-len", {"--seq-len", "16", "--workload", "gpt2"}},
      {"--gpt2-size", {"--gpt2-size", "2:2:64:512", "--workload", "gpt2"}},
      {"--gpt2-loss", {"--gpt2-loss", "plain", "--workload", "gpt2"}},
      {"--steps", {"--steps", "7"}},
      {"--warmup", {"--warmup", "2"}},
      {"--repetitions", {"--repetitions", "7"}},
      {"--target-precision", {"--target-precision", "0.05"}},
      {"--min-time", {"--min-time", "2"}},
      {"--max-time", {"--max-time", "30"}},
      {"--seed", {"--seed", "7"}},
      {"--threads", {"--threads", "3"}},
      {"--timeout", {"--timeout", "60.5"}},
      {"--loader-workers", {"--loader-workers", "2"}},
      {"--pin-memory", {"--pin-memory"}},
      {"--data-path", {"--data-path", "host"}},
      {"--data-on-device", {"--data-on-device"}},
      {"--dataset-size", {"--dataset-size", "999"}},
      {"--parity-steps", {"--parity-steps", "1"}},
      {"--parity-tolerance", {"--parity-tolerance", "0.125"}},
      {"--peak-tflops", {"--peak-tflops", "98.5"}},
      {"--dtype", {"--dtype", "bf16"}},
      {"--max-cv", {"--max-cv", "0.2"}},
      {"--slow-by", {"--slow-by", "0.1"}},
      {"--bucket-mb", {"--bucket-mb", "5"}},
      {"--no-overlap", {"--no-overlap"}},
      {"--reshard-after-forward", {"--reshard-after-forward", "off"}},
      {"--no-prefetch", {"--no-prefetch"}},
      {"--sequence-parallel", {"--sequence-parallel", "--strategy", "tp"}},
      {"--mesh", {"--mesh", "dp=2,tp=2", "--strategy", "tp"}},
      {"--grad-as-bucket-view", {"--grad-as-bucket-view"}},
      {"--sync-bn", {"--sync-bn", "--workload", "convnet"}},
      {"--checkpoint", {"--checkpoint", "/tmp/ddpbench-never-written.pt"}},
      {"--checkpoint-every", {"--checkpoint-every", "3", "--checkpoint", "/tmp/ddpbench-never-written.pt"}},
      {"--hogwild-mode", {"--hogwild-mode", "processes"}},
      {"--sync-every", {"--sync-every", "2"}},
      {"--workers", {"--workers", "3"}},
      {"--pp-schedule", {"--pp-schedule", "gpipe", "--strategy", "pp"}},
      {"--microbatches", {"--microbatches", "3", "--strategy", "pp"}},
      {"--stages-per-rank", {"--stages-per-rank", "3", "--pp-schedule", "interleaved-1f1b", "--strategy", "pp"}},
      {"--pp-balance", {"--pp-balance", "params", "--strategy", "pp"}},
      {"--pp-split", {"--pp-split", "1", "--strategy", "pp"}},
      {"--workload-lib", {"--workload-lib", DDPBENCH_EXAMPLE_PLUGIN, "--workload", "swish-mlp"}},
      {"--activation-checkpointing", {"--activation-checkpointing", "every:2"}},
      {"--grad-accum", {"--grad-accum", "2"}},
      {"--sync-every-microbatch", {"--sync-every-microbatch", "--grad-accum", "2"}},
      {"--no-sync-accum", {"--no-sync-accum", "--grad-accum", "2"}},
  };
  // The launching process's own flags, and those tested on their way elsewhere.
  const std::set<std::string> not_for_ranks = {
      "--help", "--version", "--list",  // no run
      "--json", "--no-json", "--trace",  // the launcher writes the results and the trace files
      "--device",                        // resolved before the trip: the record carries the device kind
      "--model", "--model-set",          // travel with --workload-lib; test_models.cpp runs them on ranks
  };
  const std::string help = parse_command_line({"ddpbench", "--help"}).text;
  std::set<std::string> flags;
  const std::regex flag("--[a-z][a-z0-9-]*");
  for (auto it = std::sregex_iterator(help.begin(), help.end(), flag); it != std::sregex_iterator(); ++it) {
    flags.insert(it->str());
  }
  ASSERT_GT(flags.size(), 30u) << help;
  const std::string base = record_of(parse_command_line({"ddpbench"}));
  for (const auto& f : flags) {
    if (not_for_ranks.count(f) != 0) continue;
    SCOPED_TRACE(f);
    const auto change = changes.find(f);
    ASSERT_NE(change, changes.end()) << f << " is in --help but not in this test: say what it changes in a rank";
    std::vector<std::string> argv = {"ddpbench"};
    argv.insert(argv.end(), change->second.begin(), change->second.end());
    const std::string sent = record_of(parse_command_line(argv));
    EXPECT_NE(sent, base) << f << " changes nothing the ranks are sent";
    // The rank parses what it is sent, and would send on exactly the same.
    const CommandLine rank = parse_command_line({"ddpbench", kRankOptionsFlag, sent});
    EXPECT_FALSE(rank.json_path.has_value());
    EXPECT_EQ(record_of(rank), sent);
  }
}

TEST(RankOptions, AMalformedRecordIsAUsageError) {
  EXPECT_THROW(parse_command_line({"ddpbench", kRankOptionsFlag, "{}"}), UsageError);
  EXPECT_THROW(parse_command_line({"ddpbench", kRankOptionsFlag, "not json"}), UsageError);
}

}  // namespace
}  // namespace ddpbench
