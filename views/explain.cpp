#include "views/explain.h"

#include <algorithm>
#include <map>
#include <cstdio>
#include <optional>
#include <string>

#include "base/stats.h"
#include "pipeline/balance.h"

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

// The largest device's peak over the repetitions: what must fit on one device. Nothing when any
// device's peak is unknown (that one might be the largest).
std::optional<std::int64_t> largest_device_peak(const CaseRecord& c) {
  std::optional<std::int64_t> peak;
  for (const auto& r : c.repetitions) {
    for (const auto& m : r.memory) {
      if (!m.peak_allocated_bytes) return std::nullopt;
      if (!peak || *m.peak_allocated_bytes > *peak) peak = m.peak_allocated_bytes;
    }
  }
  return peak;
}

// A case that reduce-scatters its gradients: one of the sharded strategies (tp's sequence-parallel
// reduce-scatters are of activations).
bool is_sharded(const CaseRecord& c) {
  const auto& comm = c.repetitions.back().comm;
  return comm && comm->reduce_scatter_bytes_per_step > 0 && c.spec.strategy != "tp";
}

// The sharded strategies against ddp at the same world size, in the terms a team decides by: what
// each saves in memory per device, what it costs in throughput, and the communication it exposes.
void add_sharded_lines(const std::vector<const CaseRecord*>& cases, std::vector<std::string>& lines) {
  for (const CaseRecord* c : cases) {
    if (!is_sharded(*c)) continue;
    const CaseRecord* ddp = nullptr;
    for (const CaseRecord* d : cases) {
      if (d->spec.strategy == "ddp" && d->spec.world_size == c->spec.world_size) ddp = d;
    }
    const PhaseSeconds phases = median_phases(*c);
    const double rs = phases[static_cast<int>(Phase::ReduceScatterExposed)] * 1e3;
    const double ag = phases[static_cast<int>(Phase::AllGatherExposed)] * 1e3;
    std::string line = c->spec.name() + ": ";
    const auto mine = largest_device_peak(*c);
    const auto theirs = ddp ? largest_device_peak(*ddp) : std::nullopt;
    if (ddp && mine && theirs && *theirs > 0) {
      line += format("%.2fx ddp's memory per device at %.2fx its throughput; ",
                     static_cast<double>(*mine) / static_cast<double>(*theirs),
                     c->median_items_per_second() / ddp->median_items_per_second());
    } else if (ddp) {
      line += format("%.2fx ddp's throughput (memory per device: cannot tell); ",
                     c->median_items_per_second() / ddp->median_items_per_second());
    }
    line += format("%.1f ms of reduce-scatter and %.1f ms of all-gather exposed a step", rs, ag);
    lines.push_back(line);
  }
}

std::string mebibytes(std::int64_t bytes) {
  const double mib = static_cast<double>(bytes) / (1 << 20);
  return mib >= 10 ? format("%.0f MiB", mib) : mib >= 0.1 ? format("%.2g MiB", mib) : format("%.0f KiB", mib * 1024);
}

// The communication a step could not hide, for every case that communicates and has no line of its
// own above (the sharded strategies' say it with their memory), and on a mesh what each
// dimension's collectives carried: a layout's cost laid out by the groups it runs over.
void add_exposed_communication_lines(const std::vector<const CaseRecord*>& cases, std::vector<std::string>& lines) {
  for (const CaseRecord* c : cases) {
    if (is_sharded(*c)) continue;
    const auto& comm = c->repetitions.back().comm;
    const bool on_mesh = comm && !comm->mesh.empty();
    const PhaseSeconds phases = median_phases(*c);
    const double exposed = (phases[static_cast<int>(Phase::CommExposed)] + phases[static_cast<int>(Phase::ReduceScatterExposed)] +
                            phases[static_cast<int>(Phase::AllGatherExposed)]) * 1e3;
    if (exposed <= 0 && !on_mesh) continue;
    const double step = c->median_step_seconds() * 1e3;
    std::string line = c->spec.name() + format(": %.1f ms of communication exposed a step", exposed) +
                       (step > 0 ? format(" (%.0f%% of it)", 100 * exposed / step) : std::string());
    if (on_mesh) {
      std::string layout, traffic;
      for (const auto& d : comm->mesh) {
        layout += (layout.empty() ? "" : ",") + d.name + "=" + std::to_string(d.size);
        traffic += (traffic.empty() ? "" : ", ") + d.name + " " + mebibytes(d.bytes_per_step) + " in " +
                   std::to_string(d.collectives_per_step) + " collective" + (d.collectives_per_step == 1 ? "" : "s");
      }
      line += "; on the mesh " + layout + ", a step's collectives by dimension: " + traffic;
    }
    lines.push_back(line);
  }
}

// --activation-checkpointing: what the recomputation cost a step, beside what forward then left
// alive on device 0 (the run without it is another run: ddpbench's sweep is not built yet).
void add_recompute_lines(const std::vector<const CaseRecord*>& cases, std::vector<std::string>& lines) {
  for (const CaseRecord* c : cases) {
    const double recompute = median_phases(*c)[static_cast<int>(Phase::Recompute)] * 1e3;
    if (recompute <= 0) continue;
    const double step = c->median_step_seconds() * 1e3;
    std::string line = c->spec.name() + format(": activation checkpointing recomputed %.1f ms a step", recompute) +
                       (step > 0 ? format(" (%.0f%% of it)", 100 * recompute / step) : std::string());
    const auto& memory = c->repetitions.back().memory;
    if (!memory.empty() && memory[0].activation_bytes) {
      line += "; forward left " + mebibytes(*memory[0].activation_bytes) + " of activations on device 0";
    }
    lines.push_back(line);
  }
}

// A pipeline's bubble beside its formula's for equal stages, and why they part: a stage that
// computes longer than the others (every other waits for it), or, where the stages are even, the
// sends and receives nothing hid. The median over the repetitions, with their range where there
// are several: one repetition's figure on a noisy host is one sample.
void add_pipeline_lines(const std::vector<const CaseRecord*>& cases, std::vector<std::string>& lines) {
  for (const CaseRecord* c : cases) {
    const auto& last = c->repetitions.back();
    if (!last.comm || !last.comm->pipeline || last.ranks.empty()) continue;
    const auto& p = *last.comm->pipeline;
    std::vector<double> waiting;            // each repetition's mean share of the step waited
    std::map<int, std::vector<double>> busy;  // each rank's step less its waits, each repetition
    for (const auto& r : c->repetitions) {
      if (r.ranks.empty()) continue;
      double share = 0;
      for (const auto& rank : r.ranks) {
        const double wait = rank.phase_seconds[static_cast<int>(Phase::PipelineWait)];
        share += rank.mean_step_seconds > 0 ? wait / rank.mean_step_seconds : 0;
        busy[rank.rank].push_back(rank.mean_step_seconds - wait);
      }
      waiting.push_back(share / static_cast<double>(r.ranks.size()));
    }
    double most = 0, least = -1;
    int busiest = 0;
    for (const auto& [rank, times] : busy) {
      const double m = stats::median(times);
      if (m > most) {
        most = m;
        busiest = rank;
      }
      if (least < 0 || m < least) least = m;
    }
    const double wait = stats::median(waiting);
    std::string spread;
    if (waiting.size() > 1) {
      spread = format(" (%.0f-", 100 * *std::min_element(waiting.begin(), waiting.end())) +
               format("%.0f%% over ", 100 * *std::max_element(waiting.begin(), waiting.end())) +
               std::to_string(waiting.size()) + " repetitions)";
    }
    std::string line = c->spec.name() + ": " + p.schedule + ", " + std::to_string(p.stages) + " stages, " +
                       std::to_string(p.microbatches) + " micro-batches: waiting on neighbours " +
                       format("%.0f%% of the step", 100 * wait) + spread +
                       format(" against %.0f%% for equal stages", 100 * p.expected_bubble);
    line += "; stages cut by " + p.balance;
    if (!p.stage_profile_seconds.empty()) {
      std::string profiled;
      for (double t : p.stage_profile_seconds) profiled += (profiled.empty() ? "" : "/") + format("%.3g", t * 1e3);
      line += " (profiled " + profiled + format(" ms a micro-batch, %.2fx the mean at most)", pipeline::imbalance(p.stage_profile_seconds));
    }
    if (least > 0 && most / least >= 1.1) {
      line += "; rank " + std::to_string(busiest) + format(" computes %.2fx as long as the least busy", most / least);
    } else if (wait > p.expected_bubble + 0.05) {
      line += "; the ranks compute within 10% of each other, so the rest is sends and receives nothing hid";
    }
    lines.push_back(line);
  }
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
    add_sharded_lines(cases, e.lines);
    add_exposed_communication_lines(cases, e.lines);
    add_pipeline_lines(cases, e.lines);
    add_recompute_lines(cases, e.lines);
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace ddpbench
