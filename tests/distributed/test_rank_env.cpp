// The launch environment: torchrun's and Slurm's variables, and bad values named.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "base/errors.h"
#include "distributed/rank_env.h"

namespace ddpbench {
namespace {

std::optional<RankEnv> parse(const std::map<std::string, std::string>& vars) {
  return rank_env_from([&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::string usage_error(const std::map<std::string, std::string>& vars) {
  try {
    parse(vars);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(RankEnv, NoLauncherVariablesMeansNoRank) {
  EXPECT_FALSE(parse({}).has_value());
  // An interactive shell inside a Slurm allocation is no launch.
  EXPECT_FALSE(parse({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "1"}}).has_value());
}

TEST(RankEnv, ReadsTorchrunVariables) {
  const auto env = parse({{"RANK", "3"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"},
                          {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
  EXPECT_EQ(env->master_addr, "10.0.0.1");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_FALSE(env->launcher_hosts_store);
}

TEST(RankEnv, ReadsSlurmVariables) {
  const auto env = parse({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                          {"SLURM_NTASKS_PER_NODE", "4"}, {"MASTER_ADDR", "node1"}, {"MASTER_PORT", "29400"}});
  ASSERT_TRUE(env);
  EXPECT_EQ(env->launcher, "slurm");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
}

TEST(RankEnv, BadValuesNameTheVariable) {
  const std::map<std::string, std::string> ok = {
      {"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}};
  auto with = [&](const std::string& k, const std::string& v) {
    auto m = ok;
    if (v.empty()) {
      m.erase(k);
    } else {
      m[k] = v;
    }
    return usage_error(m);
  };
  EXPECT_NE(with("RANK", "2").find("RANK=2 is not below WORLD_SIZE=2"), std::string::npos);
  EXPECT_NE(with("RANK", "x").find("RANK=x"), std::string::npos);
  EXPECT_NE(with("WORLD_SIZE", "0").find("WORLD_SIZE=0"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "").find("MASTER_PORT is not set"), std::string::npos);
  EXPECT_NE(with("MASTER_PORT", "70000").find("MASTER_PORT=70000"), std::string::npos);
  EXPECT_NE(with("MASTER_ADDR", "").find("MASTER_ADDR is not set"), std::string::npos);
  EXPECT_EQ(with("RANK", "1"), "");
}

}  // namespace
}  // namespace ddpbench
