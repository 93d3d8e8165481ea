#include "views/explain.h"

#include <algorithm>
#include <cstdio>

#include "base/stats.h"

namespace ddpbench {
namespace {

// Median over repetitions of each phase's mean time per step, in seconds.
PhaseSeconds median_phases(const CaseRecord& c) {
  PhaseSeconds out{};
  for (int p = 0; p < kPhaseCount; ++p) {
    std::vector<double> xs;
    for (const auto& r : c.repetitions) xs.push_back(r.phase_seconds[p]);
    out[p] = stats::median(xs);
  }
  return out;
}

std::string format(const char* fmt, double a, double b = 0, double c = 0, double d = 0) {
  char buf[160];
  std::snprintf(buf, sizeof(buf), fmt, a, b, c, d);
  return buf;
}

}  // namespace

std::vector<WorkloadExplanation> explain(const RunRecord& record) {
  std::vector<WorkloadExplanation> out;
  std::vector<std::string> workloads;
  for (const auto& c : record.cases) {
    if (c.measured() && std::find(workloads.begin(), workloads.end(), c.spec.workload) == workloads.end()) {
      workloads.push_back(c.spec.workload);
    }
  }
  for (const auto& w : workloads) {
    std::vector<const CaseRecord*> cases;
    for (const auto& c : record.cases) {
      if (c.spec.workload == w && c.measured()) cases.push_back(&c);
    }
    std::stable_sort(cases.begin(), cases.end(), [](const CaseRecord* a, const CaseRecord* b) {
      return a->median_items_per_second() > b->median_items_per_second();
    });
    const CaseRecord& best = *cases.front();
    const PhaseSeconds best_phases = median_phases(best);
    WorkloadExplanation e;
    e.workload = w;
    e.fastest = best.spec.name();
    e.lines.push_back(best.spec.name() + format(" is fastest: %.0f samples/s", best.median_items_per_second()));
    for (size_t i = 1; i < cases.size(); ++i) {
      const CaseRecord& c = *cases[i];
      const PhaseSeconds phases = median_phases(c);
      int worst = -1;
      double excess = 0;
      for (int p = 0; p < kPhaseCount; ++p) {
        if (phases[p] - best_phases[p] > excess) {
          excess = phases[p] - best_phases[p];
          worst = p;
        }
      }
      const double step = c.median_step_seconds();
      std::string line = c.spec.name() + format(": %.2fx the fastest's throughput", c.median_items_per_second() /
                                                                                     best.median_items_per_second());
      if (worst >= 0) {
        line += std::string("; most extra time in ") + phase_name(static_cast<Phase>(worst)) +
                format(": %.1f ms against %.1f ms (%.0f%% of its step)", phases[worst] * 1e3, best_phases[worst] * 1e3,
                       100 * phases[worst] / step);
      }
      e.lines.push_back(line);
    }
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace ddpbench
