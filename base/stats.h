#pragma once
// Summary statistics over repeated measurements. Pure functions, tested against known samples.
#include <optional>
#include <vector>

namespace ddpbench::stats {

double mean(const std::vector<double>& xs);
double median(const std::vector<double>& xs);
// Sample standard deviation (n - 1); 0 for fewer than two values.
double stddev(const std::vector<double>& xs);
// Coefficient of variation: stddev / mean; 0 when the mean is 0.
double cv(const std::vector<double>& xs);
// Linear interpolation between closest ranks (numpy's default), q in [0, 1].
double percentile(const std::vector<double>& xs, double q);

struct Interval {
  double low = 0;
  double high = 0;
};
// Distribution-free confidence interval of the median from order statistics: [x(j), x(n+1-j)] with
// the largest j for which P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2. Needs independent samples;
// none when n is too small for the confidence (fewer than 6 samples at 95%).
std::optional<Interval> median_confidence_interval(const std::vector<double>& xs, double confidence = 0.95);

// Student's t quantile for a two-sided 95% interval, t(0.975, df), df >= 1: the table's values to
// 30 degrees of freedom, a Cornish-Fisher expansion beyond (within 1e-3 of the exact value).
double t95(int df);

// Half-width of the 95% t-interval of the mean of `xs`, relative to the mean (0.03 = +-3%): how
// precisely independent repetitions pin a case's step time down. None for fewer than two values.
std::optional<double> relative_ci95_half_width(const std::vector<double>& xs);

}  // namespace ddpbench::stats
