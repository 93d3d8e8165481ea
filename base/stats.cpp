#include "base/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

namespace ddpbench::stats {

double mean(const std::vector<double>& xs) {
  if (xs.empty()) throw std::invalid_argument("stats::mean of no values");
  return std::accumulate(xs.begin(), xs.end(), 0.0) / static_cast<double>(xs.size());
}

double percentile(const std::vector<double>& xs, double q) {
  if (xs.empty()) throw std::invalid_argument("stats::percentile of no values");
  if (q < 0.0 || q > 1.0) throw std::invalid_argument("stats::percentile: q outside [0, 1]");
  std::vector<double> sorted(xs);
  std::sort(sorted.begin(), sorted.end());
  const double rank = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<size_t>(std::floor(rank));
  const auto hi = static_cast<size_t>(std::ceil(rank));
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

double median(const std::vector<double>& xs) { return percentile(xs, 0.5); }

double stddev(const std::vector<double>& xs) {
  if (xs.size() < 2) return 0.0;
  const double m = mean(xs);
  double ss = 0.0;
  for (double x : xs) ss += (x - m) * (x - m);
  return std::sqrt(ss / static_cast<double>(xs.size() - 1));
}

double cv(const std::vector<double>& xs) {
  const double m = mean(xs);
  return m == 0.0 ? 0.0 : stddev(xs) / m;
}

std::optional<Interval> median_confidence_interval(const std::vector<double>& xs, double confidence) {
  if (!(confidence > 0.0 && confidence < 1.0)) throw std::invalid_argument("stats: confidence outside (0, 1)");
  const auto n = static_cast<long long>(xs.size());
  if (n == 0) return std::nullopt;
  const double tail = (1.0 - confidence) / 2.0;
  // P(B <= i) for B ~ Binomial(n, 1/2), accumulated in log space so large n does not overflow.
  const double log_half_n = static_cast<double>(n) * std::log(0.5);
  double cdf = 0.0;
  long long j = 0;  // the largest rank with P(B <= j - 1) <= tail
  for (long long i = 0; i < n; ++i) {
    const double log_choose = std::lgamma(static_cast<double>(n) + 1) - std::lgamma(static_cast<double>(i) + 1) -
                              std::lgamma(static_cast<double>(n - i) + 1);
    cdf += std::exp(log_choose + log_half_n);
    if (cdf > tail) break;
    j = i + 1;
  }
  if (j < 1) return std::nullopt;
  std::vector<double> sorted(xs);
  std::sort(sorted.begin(), sorted.end());
  return Interval{sorted[static_cast<size_t>(j - 1)], sorted[static_cast<size_t>(n - j)]};
}

double t95(int df) {
  static const double table[] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
                                 2.201,  2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
                                 2.080,  2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042};
  if (df < 1) return std::numeric_limits<double>::infinity();
  if (df <= 30) return table[df - 1];
  const double z = 1.959964, n = df;
  return z + (z * z * z + z) / (4 * n) + (5 * std::pow(z, 5) + 16 * z * z * z + 3 * z) / (96 * n * n);
}

std::optional<double> relative_ci95_half_width(const std::vector<double>& xs) {
  if (xs.size() < 2) return std::nullopt;
  const double m = mean(xs);
  if (m <= 0) return std::nullopt;
  return t95(static_cast<int>(xs.size()) - 1) * stddev(xs) / std::sqrt(static_cast<double>(xs.size())) / m;
}

}  // namespace ddpbench::stats
