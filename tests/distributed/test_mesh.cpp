// distributed/mesh: the layout of a mesh's ranks (row-major, the last dimension's ranks neighbours),
// what --mesh refuses in one line, and the groups, each a real Gloo process group over one store,
// their all-reduces summing over their own members only.
#include <gtest/gtest.h>
#include <torch/types.h>

#include <string>
#include <vector>

#include "base/errors.h"
#include "distributed/mesh.h"
#include "distributed/process_group.h"
#include "tests/support/gloo_ranks.h"

namespace ddpbench {
namespace {

const std::vector<std::string> kKnown = {"dp", "fsdp", "tp", "pp"};

TEST(Mesh, LaysRanksOutRowMajorWithTheLastDimensionsRanksNeighbours) {
  const Mesh mesh = Mesh::parse("dp=2,tp=2", kKnown, 4);
  ASSERT_EQ(mesh.dimensions().size(), 2u);
  EXPECT_EQ(mesh.size(), 4);
  EXPECT_EQ(mesh.to_string(), "dp=2,tp=2");
  EXPECT_EQ(*mesh.find("tp"), 1u);
  EXPECT_FALSE(mesh.find("pp").has_value());
  EXPECT_EQ(mesh.coordinates(3), (std::vector<int>{1, 1}));
  EXPECT_EQ(mesh.coordinates(2), (std::vector<int>{1, 0}));
  EXPECT_EQ(mesh.group_members(1, 1), (std::vector<int>{0, 1}));  // rank 1's tp group
  EXPECT_EQ(mesh.group_members(1, 0), (std::vector<int>{1, 3}));  // its dp group
  // Three dimensions, sizes that differ: rank 17 of pp=2,dp=3,tp=4 is (1, 1, 1).
  const Mesh three = Mesh::parse("pp=2,dp=3,tp=4", kKnown, 24);
  EXPECT_EQ(Mesh::parse("pp=2,dp=3,tp=4", kKnown, 0).size(), 24);  // no --world-size: the mesh says it
  EXPECT_EQ(three.coordinates(17), (std::vector<int>{1, 1, 1}));
  EXPECT_EQ(three.group_members(17, 0), (std::vector<int>{5, 17}));
  EXPECT_EQ(three.group_members(17, 1), (std::vector<int>{13, 17, 21}));
  EXPECT_EQ(three.group_members(17, 2), (std::vector<int>{16, 17, 18, 19}));
  // Every rank is in exactly one group along each dimension, at its coordinate there.
  for (int r = 0; r < 24; ++r) {
    for (std::size_t d = 0; d < 3; ++d) {
      const auto members = three.group_members(r, d);
      EXPECT_EQ(members.at(static_cast<std::size_t>(three.coordinates(r)[d])), r) << r << " " << d;
    }
  }
}

struct BadMesh {
  std::string text;
  int world;
  std::string message;
};

class MeshRefuses : public ::testing::TestWithParam<BadMesh> {};

TEST_P(MeshRefuses, InOneLineNamingTheFlag) {
  const auto& bad = GetParam();
  try {
    Mesh::parse(bad.text, kKnown, bad.world);
    FAIL() << bad.text << " was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(std::string(e.what()), bad.message);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Inputs, MeshRefuses,
    ::testing::Values(
        BadMesh{"dp=2,tp=2", 8, "--mesh: dp=2,tp=2 is 4 ranks, and --world-size is 8"},
        BadMesh{"tp=2,tp=2", 4, "--mesh: tp is named twice"},
        BadMesh{"dp=2,zz=2", 4, "--mesh: unknown dimension 'zz' (known: dp, fsdp, tp, pp)"},
        BadMesh{"dp=2,tp", 4, "--mesh: expected dimension=size pairs such as dp=2,tp=2, not 'tp'"},
        BadMesh{"dp=2,tp=1", 2, "--mesh: tp's size must be a whole number of 2 or more, not '1'"},
        BadMesh{"dp=2,tp=two", 4, "--mesh: tp's size must be a whole number of 2 or more, not 'two'"},
        BadMesh{"dp=2,", 2, "--mesh: expected dimension=size pairs such as dp=2,tp=2, not ''"},
        BadMesh{"tp=4", 4, "--mesh: a mesh has two dimensions or more; one alone is --strategy's (tp=4)"}),
    [](const auto& info) { return "case" + std::to_string(info.index); });

TEST(MeshGroups, EachDimensionsAllReduceSumsOverItsOwnMembersOnly) {
  const Mesh mesh = Mesh::parse("dp=2,tp=2", kKnown, 4);
  testing::on_gloo_ranks(4, [&](ProcessGroupContext& world) {
    auto groups = mesh_groups(world, mesh);
    ASSERT_EQ(groups.size(), 2u);
    const auto at = mesh.coordinates(world.rank());
    for (std::size_t d = 0; d < 2; ++d) {
      ProcessGroupContext& group = *groups[d];
      EXPECT_EQ(group.size(), 2);
      EXPECT_EQ(group.rank(), at[d]);
      // Each rank all-reduces its world rank: the sum is its group's members'.
      auto value = torch::full({1}, static_cast<double>(world.rank()), torch::kFloat64);
      group.allreduce(value, "mesh test");
      const auto members = mesh.group_members(world.rank(), d);
      EXPECT_EQ(value.item<double>(), members[0] + members[1]) << "rank " << world.rank() << " dimension " << d;
    }
    // The world's own group still works beside them.
    auto all = torch::ones({1}, torch::kFloat64);
    world.allreduce(all, "mesh test: the world");
    EXPECT_EQ(all.item<double>(), 4.0);
  });
}

}  // namespace
}  // namespace ddpbench
