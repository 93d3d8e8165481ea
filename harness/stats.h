#pragma once
// Summary statistics over repeated measurements. Pure functions, tested against known samples.
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

}  // namespace ddpbench::stats
