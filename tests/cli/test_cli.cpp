// The command line end to end: bad input is one line naming the flag and exit 2 with nothing
// written, numbers in every decimal spelling, --list, --help, --version, oversubscribed threads.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <ostream>
#include <string>
#include <vector>

#include "tests/support/test_support.h"

namespace ddpbench {
namespace {

using nlohmann::json;
using testing::ddpbench_args;
using testing::directory_entries;
using testing::path_exists;
using testing::run_process;
using testing::ScratchDir;
using testing::tiny_run;

struct BadInput {
  std::vector<std::string> args;
  std::string flag;  // the one line must name it
  std::string says;  // and say this about it
};

// What a failing case prints of its parameter: the flags it passed.
void PrintTo(const BadInput& input, std::ostream* out) {
  for (const auto& a : input.args) *out << (a.empty() ? "''" : a) << ' ';
}

class BadInputTest : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTest, ExitsTwoWithOneLineNamingTheFlagAndWritesNothing) {
  ScratchDir dir;
  const auto json_path = dir.file("results.json");
  auto args = tiny_run(json_path, GetParam().args);
  const auto r = run_process(args);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(GetParam().flag), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(GetParam().says), std::string::npos) << r.err;
  EXPECT_FALSE(path_exists(json_path));
  EXPECT_EQ(directory_entries(dir.path()).size(), 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Cli, BadInputTest,
    ::testing::Values(
        BadInput{{"--strategy", "zero3"}, "--strategy", "unknown name 'zero3'"},
        BadInput{{"--strategy", "single,"}, "--strategy", "empty name"},
        BadInput{{"--workload", "resnet"}, "--workload", "unknown name 'resnet'"},
        BadInput{{"--steps", "0"}, "--steps", "at least 1, got 0"},
        BadInput{{"--steps", "-3"}, "--steps", "at least 1, got -3"},
        BadInput{{"--steps", "ten"}, "--steps", "'ten' is not a whole number"},
        BadInput{{"--repetitions", "0"}, "--repetitions", "at least 1"},
        BadInput{{"--warmup", "-1"}, "--warmup", "at least 0"},
        BadInput{{"--batch", "0"}, "--batch", "at least 1, got 0"},
        BadInput{{"--batch", "1.5"}, "--batch", "not a whole number"},
        BadInput{{"--batch", "1", "--world-size", "2", "--strategy", "dp"}, "--batch", "smaller than the world size"},
        BadInput{{"--batch", "8", "--batch", "9"}, "--batch", "received 2"},
        BadInput{{"--world-size", "0"}, "--world-size", "at least 1"},
        BadInput{{"--threads", "x"}, "--threads", "not a whole number"},
        BadInput{{"--timeout", "-1"}, "--timeout", "more than 0"},
        BadInput{{"--timeout", "soon"}, "--timeout", "not a number"},
        // Values it could not honour (issue 43 item 8): a rendezvous needs more, deadlines overflow.
        BadInput{{"--timeout", "0.5"}, "--timeout", "0.5 s is outside 1 to 1000000 s"},
        BadInput{{"--timeout", "1e10"}, "--timeout", "1e10 s is outside 1 to 1000000 s"},
        BadInput{{"--timeout", "1e12"}, "--timeout", "outside 1 to 1000000 s"},
        BadInput{{"--seed", "-1"}, "--seed", "at least 0"},
        BadInput{{"--loader-workers", "-2"}, "--loader-workers", "at least 0"},
        BadInput{{"--device", "tpu"}, "--device", "unknown device 'tpu'"},
        BadInput{{"--pin-memory"}, "--pin-memory", "needs --device cuda"},
        BadInput{{"--dataset-size", "4"}, "--dataset-size", "cannot fill a global batch of 8"},
        BadInput{{"--max-cv", "-0.1"}, "--max-cv", "not a non-negative number"},
        BadInput{{"--trace", "/proc/version/traces"}, "--trace", "'/proc/version' is in the way"},
        BadInput{
            {"--json", "/no/such/dir/r.json"}, "--json", "does not exist (create it first: mkdir -p '/no/such/dir')"},
        // An empty value is never the default in disguise.
        BadInput{{"--trace", ""}, "--trace", "empty value"},
        BadInput{{"--parity-tolerance", ""}, "--parity-tolerance", "empty value"},
        BadInput{{"--peak-tflops", ""}, "--peak-tflops", "empty value"},
        BadInput{{"--steps", ""}, "--steps", "empty value"},
        // Nothing after '=' is an empty value too, not a cue to take the next argument (issue 43 item 8).
        BadInput{{"--trace=", "--no-overlap"}, "--trace", "empty value after '='"},
        BadInput{{"--steps=", "5"}, "--steps", "empty value after '='"},
        // Numbers are decimal, whole, and nothing else: no hex, no blanks on either side, no inf.
        BadInput{{"--peak-tflops", "0x10"}, "--peak-tflops", "'0x10' is not a positive number"},
        BadInput{{"--max-cv", "0x1p-3"}, "--max-cv", "not a non-negative number"},
        BadInput{{"--timeout", "inf"}, "--timeout", "not a number of seconds"},
        BadInput{{"--steps", " 3"}, "--steps", "' 3' is not a whole number"},
        BadInput{{"--steps", "3 "}, "--steps", "'3 ' is not a whole number"},
        BadInput{{"--batch", "0x8"}, "--batch", "not a whole number"},
        BadInput{{"--no-json"}, "--no-json", "cannot be given with --json"},
        BadInput{{"--max-time", "5"}, "--max-time", "applies to adaptive sampling"},  // with --repetitions 2
        BadInput{{"--target-precision", "1"}, "--target-precision", "+-100% or more"},
        BadInput{{"--target-precision", "-0.1"}, "--target-precision", "not a non-negative number"},
        BadInput{{"--target-precision", "0.1", "--repetitions", "1"}, "--repetitions", "at least 2"},
        BadInput{
            {"--target-precision", "0.1", "--min-time", "9", "--max-time", "3"}, "--max-time", "less than --min-time"},
        BadInput{{"--slow-by", "-0.1"}, "--slow-by", "not a non-negative number"},
        BadInput{{"--slow-by", "11"}, "--slow-by", "more than 10"},
        BadInput{{"--strategy", "ddp", "--checkpoint", "/tmp/ddpbench-never-written.pt", "--checkpoint-every", "1000"},
                 "--checkpoint-every",
                 "more than the 3 steps of a repetition"},
        BadInput{{"--hogwild-mode", "fibers", "--strategy", "hogwild"}, "--hogwild-mode", "unknown mode 'fibers'"},
        BadInput{{"--sync-every", "0", "--strategy", "hogwild"}, "--sync-every", "at least 1"},
        BadInput{{"--sync-every", "2", "--strategy", "single"}, "--sync-every", "applies to hogwild only"},
        BadInput{{"--hogwild-mode", "processes", "--strategy", "dp"}, "--hogwild-mode", "applies to hogwild only"},
        BadInput{{"--dtype", "fp64"}, "--dtype", "unknown dtype 'fp64'"},
        BadInput{{"--dtype", "fp16"}, "--dtype", "fp16 autocast needs CUDA"},  // a CPU run
        BadInput{{"--peak-tflops", "0"}, "--peak-tflops", "not a positive number"},
        BadInput{{"--peak-tflops", "fast"}, "--peak-tflops", "not a positive number"},
        BadInput{{"--data-path", "disk"}, "--data-path", "unknown data path 'disk'"},
        BadInput{{"--strategy", "hogwild", "--workers", "0"}, "--workers", "at least 1, got 0"},
        BadInput{{"--strategy", "single", "--workers", "4"}, "--workers", "applies to hogwild only"},
        BadInput{{"--strategy", "ddp", "--sequence-parallel"}, "--sequence-parallel", "applies to tp only"},
        BadInput{{"--strategy", "ddp", "--mesh", "dp=2,tp=2"}, "--mesh", "applies to tp and pp only"},
        BadInput{{"--strategy", "pp", "--mesh", "dp=2,tp=2"}, "--mesh",
                 "dp=2,tp=2 runs tp on its tp dimension, and --strategy does not include it"},
        BadInput{{"--strategy", "tp", "--mesh", "dp=2,pp=2"}, "--mesh",
                 "dp=2,pp=2 runs pp on its pp dimension, and --strategy does not include it"},
        BadInput{{"--strategy", "pp", "--mesh", "fsdp=2,pp=2", "--no-prefetch"}, "--no-prefetch",
                 "applies to fsdp (or a --mesh with fsdp and tp) only"},
        BadInput{{"--strategy", "tp,pp", "--mesh", "dp=2,pp=2,tp=2"}, "--mesh", "tp and pp on one mesh (3-D) is not built yet"},
        BadInput{{"--strategy", "pp", "--mesh", "dp=2,fsdp=2"}, "--mesh", "has neither"},
        BadInput{{"--strategy", "tp", "--mesh", "dp=2,tp=2", "--world-size", "2"}, "--mesh",
                 "dp=2,tp=2 is 4 ranks, and --world-size is 2"},
        BadInput{{"--strategy", "tp", "--mesh", "tp=4"}, "--mesh", "two dimensions or more"},
        BadInput{{"--strategy", "tp", "--mesh", "dp=2,ep=2"}, "--mesh", "unknown dimension 'ep' (known: dp, fsdp, tp, pp)"},
        BadInput{{"--strategy", "tp", "--mesh", "dp=2,fsdp=2,tp=2"}, "--mesh", "a mesh takes one of them"},
        BadInput{{"--strategy", "tp", "--mesh", "fsdp=2,tp=2", "--sequence-parallel"}, "--sequence-parallel",
                 "not yet on a mesh with fsdp"},
        BadInput{{"--strategy", "tp", "--mesh", "dp=2,tp=2", "--no-prefetch"}, "--no-prefetch",
                 "applies to fsdp (or a --mesh with fsdp and tp) only"},
        BadInput{{"--strategy", "tp", "--mesh", "dp=2,tp=1"}, "--mesh", "tp's size must be a whole number of 2 or more"},
        BadInput{{"--activation-checkpointing", "every:0"}, "--activation-checkpointing", "every:N takes a whole N of 1 or more"},
        BadInput{{"--activation-checkpointing", "selective"}, "--activation-checkpointing",
                 "unknown policy 'selective' (expected none, full or every:N)"},
        BadInput{{"--grad-accum", "0"}, "--grad-accum", "at least 1, got 0"},
        BadInput{{"--grad-accum", "3"}, "--grad-accum", "3 micro-batches do not divide mlp's batch of 8 (--batch)"},
        BadInput{{"--strategy", "ddp", "--sync-every-microbatch"}, "--sync-every-microbatch", "needs --grad-accum 2 or more"},
        BadInput{{"--strategy", "single", "--grad-accum", "2", "--sync-every-microbatch"}, "--sync-every-microbatch",
                 "applies to ddp, zero1 and zero2 only, which --strategy does not include"},
        BadInput{{"--strategy", "ddp", "--grad-accum", "2", "--no-sync-accum"}, "--no-sync-accum",
                 "applies to fsdp (or a --mesh with fsdp and tp) only, which --strategy does not include"},
        BadInput{{"--data-on-device", "--data-path", "host"}, "--data-on-device", "contradicts --data-path host"},
        BadInput{{"--seq-len", "64"}, "--seq-len", "none of the workloads run takes a sequence length"},
        BadInput{{"--workload", "gpt2", "--seq-len", "2048"}, "--seq-len", "at most 1024, got 2048"},
        BadInput{{"--workload", "gpt2", "--seq-len", "0"}, "--seq-len", "at least 1, got 0"},
        BadInput{{"--gpt2-size", "xl"}, "--gpt2-size", "gpt2 is not among the workloads run"},
        BadInput{{"--gpt2-loss", "plain"}, "--gpt2-loss", "gpt2 is not among the workloads run"},
        BadInput{{"--workload", "gpt2", "--gpt2-loss", "chunked"}, "--gpt2-loss", "unknown loss path 'chunked'"},
        BadInput{{"--workload", "gpt2", "--gpt2-size", "huge"}, "--gpt2-size", "expected small, medium, large, xl or"},
        BadInput{{"--workload", "gpt2", "--gpt2-size", "2:3:64"}, "--gpt2-size", "width 64 is not a multiple of heads 3"},
        BadInput{{"--workload", "gpt2", "--gpt2-size", "0:2:64"}, "--gpt2-size", "layers must be 1 to 1024, got 0"},
        BadInput{{"--workload", "gpt2", "--gpt2-size", "2:2:6x"}, "--gpt2-size", "width '6x' is not a whole number"},
        BadInput{{"--workload", "gpt2", "--gpt2-size", "2:2:64:1"}, "--gpt2-size", "vocabulary must be 2 to"},
        // The results are JSON, which holds UTF-8 text only: other bytes are refused naming the flag.
        BadInput{{"--trace", "traces\xff"}, "--trace", "'traces\\xFF' is not UTF-8 text (byte 0xFF at offset 6)"},
        BadInput{{"--json", "r\xfe.json"}, "--json", "is not UTF-8 text (byte 0xFE at offset 1)"},
        BadInput{{"--model-set", "target=class:\xc3"}, "--model-set", "is not UTF-8 text (byte 0xC3 at offset 13)"},
        BadInput{{"--workload=mlp\xed\xa0\x80"}, "--workload", "not UTF-8 text (byte 0xED at offset 14)"},
        BadInput{{"--no-such-flag"}, "--no-such-flag", ""}),
    [](const ::testing::TestParamInfo<BadInput>& info) { return testing::test_name_from(info.param.args); });

TEST(Cli, DeviceCudaWithoutCudaExitsTwo) {
  // Meaningful only where no GPU is visible; on a GPU machine the CUDA path is tested elsewhere.
  ScratchDir dir;
  const auto r = run_process(ddpbench_args({"--device", "cuda", "--world-size", "64", "--json", dir.file("r.json")}));
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_TRUE(r.err.find("--device") != std::string::npos || r.err.find("--world-size") != std::string::npos) << r.err;
  EXPECT_FALSE(path_exists(dir.file("r.json")));
}

TEST(Cli, ListNamesEveryStrategyAndWorkload) {
  const auto r = run_process(ddpbench_args({"--list"}));
  ASSERT_EQ(r.exit_code, 0);
  for (const char* name : {"single", "dp", "dp-loss-in-model", "ddp", "hogwild", "mlp", "convnet", "transformer",
                           "wide-logits"}) {
    EXPECT_NE(r.out.find(std::string("  ") + name + " "), std::string::npos) << name;
  }
}

TEST(Cli, HelpAndVersionExitZero) {
  const auto help = run_process(ddpbench_args({"--help"}));
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--strategy"), std::string::npos);
  const auto version = run_process(ddpbench_args({"--version"}));
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_NE(version.out.find("ddpbench "), std::string::npos);
}

TEST(Cli, NumbersInEveryDecimalSpellingAreAccepted) {
  for (const auto& value : {"0.05", "5e-2", ".5", "+1", "1.", "2E1"}) {
    SCOPED_TRACE(value);
    ScratchDir dir;
    const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--max-cv", value}));
    EXPECT_EQ(r.exit_code, 0) << r.err;
  }
}

TEST(Cli, MoreThreadsThanCoresRunsButSaysSo) {
  ScratchDir dir;
  const auto r = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--threads", "64"}));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("ddpbench: warning: --threads 64 on each of 2 device(s) is 128 threads on"), std::string::npos)
      << r.err;
  const auto quiet = run_process(tiny_run(dir.file("r.json"), {"--strategy", "single", "--threads", "1"}));
  EXPECT_EQ(quiet.err.find("warning"), std::string::npos) << quiet.err;
}

// What the machine says of itself (here a recorded environment variable; the host name takes the
// same path) is not the user's to fix: bytes that are not UTF-8 are recorded as \xHH, and the run
// and its JSON complete.
TEST(Cli, BytesThatAreNotUtf8InTheEnvironmentAreRecordedEscaped) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  const auto r = run_process(tiny_run(path, {"--strategy", "single"}), 0, {{"OMP_DDPBENCH_PROBE", "a\xff" "b"}});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto doc = json::parse(testing::read_text(path));
  EXPECT_EQ(doc.at("context").at("ddpbench").at("env").at("OMP_DDPBENCH_PROBE"), "a\\xFFb") << doc.at("context").dump();
}

// DDPBENCH_NCCL_WAIT acts on NCCL only, but a misspelling is refused on any machine, before a case
// runs: one line naming the variable, exit 2, nothing written. Its two values run.
TEST(Cli, AnUnknownNcclWaitIsBadInputNamingTheVariable) {
  ScratchDir dir;
  const auto path = dir.file("r.json");
  const auto r = run_process(tiny_run(path, {"--strategy", "single"}), 0, {{"DDPBENCH_NCCL_WAIT", "strem"}});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find("DDPBENCH_NCCL_WAIT: expected host or stream, got 'strem'"), std::string::npos) << r.err;
  EXPECT_EQ(directory_entries(dir.path()).size(), 0u);
  for (const char* value : {"host", "stream"}) {
    const auto ok = run_process(tiny_run(path, {"--strategy", "single"}), 0, {{"DDPBENCH_NCCL_WAIT", value}});
    EXPECT_EQ(ok.exit_code, 0) << value << ": " << ok.err;
  }
}

}  // namespace
}  // namespace ddpbench
