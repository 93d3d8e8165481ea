#include "distributed/mesh.h"

#include <algorithm>
#include <stdexcept>

#include "base/errors.h"
#include "distributed/process_group.h"

namespace ddpbench {
namespace {

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

// A whole number of 2 or more, or none.
std::optional<int> dimension_size(const std::string& text) {
  if (text.empty() || text.size() > 6 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return std::nullopt;
  }
  const int size = std::stoi(text);
  return size >= 2 ? std::optional<int>(size) : std::nullopt;
}

}  // namespace

Mesh Mesh::parse(const std::string& text, const std::vector<std::string>& known, int world_size) {
  const auto bad = [&](const std::string& why) { return UsageError("--mesh: " + why); };
  Mesh mesh;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    const std::string pair = text.substr(start, comma - start);
    const std::size_t equals = pair.find('=');
    if (equals == std::string::npos) {
      throw bad("expected dimension=size pairs such as dp=2,tp=2, not '" + pair + "'");
    }
    const std::string name = pair.substr(0, equals);
    if (std::find(known.begin(), known.end(), name) == known.end()) {
      throw bad("unknown dimension '" + name + "' (known: " + joined(known) + ")");
    }
    if (mesh.find(name)) throw bad(name + " is named twice");
    const auto size = dimension_size(pair.substr(equals + 1));
    if (!size) throw bad(name + "'s size must be a whole number of 2 or more, not '" + pair.substr(equals + 1) + "'");
    mesh.dimensions_.push_back({name, *size});
    start = comma + 1;
  }
  if (mesh.dimensions_.size() < 2) {
    throw bad("a mesh has two dimensions or more; one alone is --strategy's (" + text + ")");
  }
  if (world_size != 0 && mesh.size() != world_size) {
    throw bad(mesh.to_string() + " is " + std::to_string(mesh.size()) + " ranks, and --world-size is " +
              std::to_string(world_size));
  }
  return mesh;
}

int Mesh::size() const {
  int n = 1;
  for (const auto& d : dimensions_) n *= d.size;
  return n;
}

std::string Mesh::to_string() const {
  std::string out;
  for (const auto& d : dimensions_) out += (out.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
  return out;
}

std::optional<std::size_t> Mesh::find(const std::string& name) const {
  for (std::size_t i = 0; i < dimensions_.size(); ++i) {
    if (dimensions_[i].name == name) return i;
  }
  return std::nullopt;
}

std::vector<int> Mesh::coordinates(int rank) const {
  if (rank < 0 || rank >= size()) throw std::out_of_range("rank " + std::to_string(rank) + " outside " + to_string());
  std::vector<int> out(dimensions_.size());
  for (std::size_t i = dimensions_.size(); i-- > 0;) {  // row-major: the last dimension varies fastest
    out[i] = rank % dimensions_[i].size;
    rank /= dimensions_[i].size;
  }
  return out;
}

std::vector<int> Mesh::group_members(int rank, std::size_t dim) const {
  if (dim >= dimensions_.size()) throw std::out_of_range("dimension " + std::to_string(dim) + " of " + to_string());
  // The stride of `dim` in the row-major layout: the product of the sizes after it.
  int stride = 1;
  for (std::size_t i = dim + 1; i < dimensions_.size(); ++i) stride *= dimensions_[i].size;
  const int first = rank - coordinates(rank)[dim] * stride;
  std::vector<int> members;
  for (int k = 0; k < dimensions_[dim].size; ++k) members.push_back(first + k * stride);
  return members;
}

std::vector<std::unique_ptr<ProcessGroupContext>> mesh_groups(ProcessGroupContext& world, const Mesh& mesh) {
  if (world.size() != mesh.size()) {
    throw std::logic_error("mesh_groups: " + mesh.to_string() + " over a world of " + std::to_string(world.size()));
  }
  std::vector<std::unique_ptr<ProcessGroupContext>> groups;
  for (std::size_t dim = 0; dim < mesh.dimensions().size(); ++dim) {
    groups.push_back(world.subgroup(mesh.dimensions()[dim].name, mesh.group_members(world.rank(), dim)));
  }
  return groups;
}

}  // namespace ddpbench
