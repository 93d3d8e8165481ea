#pragma once
// Where a pipeline cuts its chain of units into stages: evenly by count, so that every stage's
// cost (measured time, or parameters) is as even as contiguous runs allow, or at cut points a user
// gave. Costs in, runs of units out: no tensors, no timing. The `pp` strategy measures the costs
// (strategies/pp_stages.h); tests and the projection can cut any list.
#include <cstddef>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddpbench::pipeline {

// How the stages are cut when no --pp-split is given: by measured forward + backward time per unit
// (a short profiling pass, the default), by parameter count, or by unit count alone.
enum class BalanceKind { Time, Params, Even };
const char* to_string(BalanceKind kind);  // "time", "params", "even"
std::optional<BalanceKind> parse_balance(const std::string& name);

// Units [begin, end) of each stage, in chain order, every unit in one stage and none empty.
using StageSpans = std::vector<std::pair<std::size_t, std::size_t>>;

// `stages` runs of `units` units as even as the count allows, the earlier stages one more.
StageSpans even_split(std::size_t units, int stages);

// Contiguous runs of `costs` (one a unit, in chain order, none negative) into `stages` stages,
// the largest stage's sum the least it can be; of cuts that tie, the one whose stages' unit counts
// are most even (then the one with more units early), so that equal costs give even_split's cut. Throws
// std::invalid_argument where there are fewer units than stages.
StageSpans balanced_split(const std::vector<double>& costs, int stages);

// The stages that the cut points `cuts` make of `units` units: "4,8" on 12 units is [0,4) [4,8)
// [8,12). Why they cannot (not rising, 0, past the chain's end, or a count other than stages - 1),
// in words that name --pp-split, or the spans.
struct SplitOrWhy {
  StageSpans spans;
  std::string why;  // empty: spans is the split
};
SplitOrWhy split_at(const std::vector<std::size_t>& cuts, std::size_t units, int stages);

// Each stage's sum of `costs`, and the largest over the mean (1: perfectly even).
std::vector<double> stage_sums(const std::vector<double>& costs, const StageSpans& spans);
double imbalance(const std::vector<double>& stage_costs);

}  // namespace ddpbench::pipeline
