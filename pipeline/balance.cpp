#include "pipeline/balance.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace ddpbench::pipeline {

const char* to_string(BalanceKind kind) {
  switch (kind) {
    case BalanceKind::Time: return "time";
    case BalanceKind::Params: return "params";
    case BalanceKind::Even: return "even";
  }
  return "?";
}

std::optional<BalanceKind> parse_balance(const std::string& name) {
  for (auto kind : {BalanceKind::Time, BalanceKind::Params, BalanceKind::Even}) {
    if (name == to_string(kind)) return kind;
  }
  return std::nullopt;
}

StageSpans even_split(std::size_t units, int stages) {
  StageSpans out;
  const std::size_t n = static_cast<std::size_t>(stages), base = units / n, extra = units % n;
  std::size_t begin = 0;
  for (std::size_t k = 0; k < n; ++k) {
    const std::size_t end = begin + base + (k < extra ? 1 : 0);
    out.emplace_back(begin, end);
    begin = end;
  }
  return out;
}

// Dynamic programming over (stages used, units covered): the least largest-stage sum, and of those
// the least spread of unit counts (sum of squared counts, smallest when counts are even), then the
// most units in the earlier stages, as even_split gives them. Units are
// tens, stages a handful: O(stages x units^2) is nothing.
StageSpans balanced_split(const std::vector<double>& costs, int stages) {
  const std::size_t n = costs.size(), s = static_cast<std::size_t>(stages);
  if (stages < 1 || n < s) {
    throw std::invalid_argument(std::to_string(stages) + " stages need a unit each, and the chain has " + std::to_string(n));
  }
  std::vector<double> prefix(n + 1, 0.0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  struct Best {
    double largest = std::numeric_limits<double>::infinity();
    double spread = std::numeric_limits<double>::infinity();
    std::size_t from = 0;
  };
  // best[k][i]: the first i units in k stages.
  std::vector<std::vector<Best>> best(s + 1, std::vector<Best>(n + 1));
  best[0][0] = {0.0, 0.0, 0};
  // Sums of measured times are compared with a relative slack, so that rounding in the prefix
  // sums cannot pick an uneven cut over an even one of the same cost.
  const auto less = [](double a, double b) { return a < b - 1e-12 * std::max(std::abs(a), std::abs(b)); };
  for (std::size_t k = 1; k <= s; ++k) {
    for (std::size_t i = k; i + (s - k) <= n; ++i) {
      for (std::size_t j = k - 1; j < i; ++j) {
        const Best& before = best[k - 1][j];
        if (before.largest == std::numeric_limits<double>::infinity()) continue;
        const double largest = std::max(before.largest, prefix[i] - prefix[j]);
        const double count = static_cast<double>(i - j);
        const double spread = before.spread + count * count;
        Best& here = best[k][i];
        if (less(largest, here.largest) || (!less(here.largest, largest) && spread <= here.spread)) here = {largest, spread, j};
      }
    }
  }
  StageSpans out(s);
  std::size_t end = n;
  for (std::size_t k = s; k >= 1; --k) {
    const std::size_t begin = best[k][end].from;
    out[k - 1] = {begin, end};
    end = begin;
  }
  return out;
}

SplitOrWhy split_at(const std::vector<std::size_t>& cuts, std::size_t units, int stages) {
  SplitOrWhy r;
  const auto list = [&] {
    std::string text;
    for (auto c : cuts) text += (text.empty() ? "" : ",") + std::to_string(c);
    return text;
  };
  if (cuts.size() + 1 != static_cast<std::size_t>(stages)) {
    r.why = "--pp-split " + list() + " cuts " + std::to_string(cuts.size() + 1) + " stages, and the case runs " + std::to_string(stages);
    return r;
  }
  std::size_t begin = 0;
  for (std::size_t c : cuts) {
    if (c <= begin) {
      r.why = "--pp-split " + list() + ": cut points must rise from 1, every stage a unit at least";
      return r;
    }
    if (c >= units) {
      r.why = "--pp-split " + list() + ": cut " + std::to_string(c) + " leaves the last stage no unit of the chain's " + std::to_string(units);
      return r;
    }
    r.spans.emplace_back(begin, c);
    begin = c;
  }
  r.spans.emplace_back(begin, units);
  return r;
}

std::vector<double> stage_sums(const std::vector<double>& costs, const StageSpans& spans) {
  std::vector<double> out;
  for (const auto& [begin, end] : spans) {
    out.push_back(std::accumulate(costs.begin() + static_cast<std::ptrdiff_t>(begin), costs.begin() + static_cast<std::ptrdiff_t>(end), 0.0));
  }
  return out;
}

double imbalance(const std::vector<double>& stage_costs) {
  if (stage_costs.empty()) return 1.0;
  const double mean = std::accumulate(stage_costs.begin(), stage_costs.end(), 0.0) / static_cast<double>(stage_costs.size());
  return mean > 0 ? *std::max_element(stage_costs.begin(), stage_costs.end()) / mean : 1.0;
}

}  // namespace ddpbench::pipeline
