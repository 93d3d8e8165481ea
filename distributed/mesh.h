#pragma once
// A device mesh (PyTorch's DeviceMesh; torchtitan's layouts): the world's ranks on a grid of named
// dimensions, with one process group per dimension. `dp=2,tp=2` lays the ranks out row-major, the
// last dimension's ranks neighbours: ranks 0 and 1 share a tp group, 0 and 2 a dp group. So the
// innermost dimension stays inside a node, where tensor parallelism's per-layer collectives belong,
// and the outer ones cross nodes. What each dimension runs over its group is its strategy's; this
// file holds the layout and builds the groups.
#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace ddpbench {

class ProcessGroupContext;

struct MeshDimension {
  std::string name;  // dp, fsdp, tp, pp
  int size = 1;
};

class Mesh {
 public:
  // `text` as the user wrote it ("dp=2,tp=2"): two dimensions or more, each name one of `known`
  // and at most once, each size a whole number of 2 or more, their product `world_size` (0: any,
  // the mesh then says the world's size). Throws UsageError, one line naming --mesh and what is
  // wrong, otherwise.
  static Mesh parse(const std::string& text, const std::vector<std::string>& known, int world_size);

  const std::vector<MeshDimension>& dimensions() const { return dimensions_; }
  int size() const;               // the ranks: the product of the sizes
  std::string to_string() const;  // "dp=2,tp=2"
  std::optional<std::size_t> find(const std::string& name) const;

  // `rank`'s index along each dimension.
  std::vector<int> coordinates(int rank) const;
  // The ranks of `rank`'s group along dimension `dim`: those whose coordinates are rank's on every
  // other dimension, in order along `dim` (so a member's index in it is its coordinate there).
  std::vector<int> group_members(int rank, std::size_t dim) const;

 private:
  std::vector<MeshDimension> dimensions_;
};

// This rank's group along each of the mesh's dimensions, in the mesh's order, each a process group
// of its own over `world`'s store (ProcessGroupContext::subgroup). Every rank of `world` calls it
// alike; `world`'s size must be the mesh's.
std::vector<std::unique_ptr<ProcessGroupContext>> mesh_groups(ProcessGroupContext& world, const Mesh& mesh);

}  // namespace ddpbench
