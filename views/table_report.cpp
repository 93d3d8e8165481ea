#include "views/table_report.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <vector>

#include "views/explain.h"
#include "base/stats.h"

namespace ddpbench {
namespace {

// A case whose CV is this many times its workload's noise floor varies for reasons of its own.
constexpr double kWellAboveNoiseFloor = 3;

std::string fmt(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), format, v);
  return buf;
}

std::string bytes(std::int64_t b) {
  if (b >= (1LL << 30)) return fmt("%.2f GiB", static_cast<double>(b) / (1LL << 30));
  if (b >= (1LL << 20)) return fmt("%.1f MiB", static_cast<double>(b) / (1LL << 20));
  return fmt("%.0f KiB", static_cast<double>(b) / (1LL << 10));
}

}  // namespace

std::string format_table(const RunRecord& record) {
  const std::vector<std::string> header = {"case",    "status",   "step ms",   "cv",    "+-95%",  "samples/s",
                                           "TFLOP/s", "scaling", "mem dev0", "imbalance", "parity"};
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;
  for (const auto& c : record.cases) {
    std::vector<std::string> row = {c.spec.name(), to_string(c.status)};
    if (!c.repetitions.empty()) {
      const std::vector<double> means = c.repetition_means();
      row.push_back(fmt("%.2f", c.median_step_seconds() * 1e3));
      // A trailing * marks a noisy case (CV above --max-cv).
      row.push_back(fmt("%.1f%%", stats::cv(means) * 100) + (c.noisy ? "*" : ""));
      // What the repetitions pin the lower-quartile step down to; a trailing ! marks a case that adaptive
      // sampling stopped at --max-time short of --target-precision.
      row.push_back((c.achieved_precision ? fmt("%.1f%%", *c.achieved_precision * 100) : "-") +
                    (c.unresolved ? "!" : ""));
      row.push_back(fmt("%.0f", c.median_items_per_second()));
      // Achieved arithmetic rate, and its share of the devices' peak where that is known; "-" for
      // a workload whose FLOPs are unknown (a model exported without a count).
      const double flops = c.flops_at(c.median_items_per_second());
      row.push_back(c.facts.flops_per_sample <= 0 ? "-"
                                                  : fmt(flops >= 1e12 ? "%.1f" : "%.3f", flops / 1e12) +
                                                        (c.peak ? fmt(" (%.0f%%)", 100 * flops / c.peak->flops_per_second) : ""));
      row.push_back(c.scaling_efficiency ? fmt("%.2f", *c.scaling_efficiency) : "-");
      std::optional<std::int64_t> dev0;
      for (const auto& r : c.repetitions) {
        if (!r.memory.empty() && r.memory[0].peak_allocated_bytes) {
          dev0 = std::max(dev0.value_or(0), *r.memory[0].peak_allocated_bytes);
        }
      }
      row.push_back(dev0 ? bytes(*dev0) : "-");
      const auto imbalance = memory_imbalance(c.repetitions.back().memory);
      row.push_back(imbalance ? fmt("%.2fx", *imbalance) : "-");
    } else {
      row.insert(row.end(), {"-", "-", "-", "-", "-", "-", "-", "-"});
    }
    if (c.loss_vs_single) {
      // Asynchronous: the loss against single's after the same samples is the number to read.
      row.push_back(fmt("loss %.3fx", c.loss_vs_single->ratio()));
    } else if (c.parity && c.parity->compared_by_loss) {
      row.push_back(fmt("loss %.3fx", c.parity->reference_final_loss != 0
                                         ? c.parity->final_loss / c.parity->reference_final_loss
                                         : 0.0));
    } else if (c.parity && !c.parity->checked) {
      row.push_back("cannot tell");
    } else if (c.parity) {
      row.push_back(fmt("%.1e", c.parity->max_rel_param_diff) + (c.parity->within_tolerance ? " ok" : " DIFF"));
    } else {
      row.push_back("-");
    }
    if (!c.reason.empty()) notes.push_back(c.spec.name() + ": " + c.reason);
    if (c.cv_over_noise_floor && *c.cv_over_noise_floor >= kWellAboveNoiseFloor && c.noisy) {
      notes.push_back(c.spec.name() + ": its repetitions vary " + fmt("%.1f", *c.cv_over_noise_floor) +
                      "x as much as single's (the machine's noise floor here): the spread is the case's own, not "
                      "the machine's");
    }
    if (!c.note.empty()) notes.push_back(c.spec.name() + ": " + c.note);
    if (c.parity && !c.parity->note.empty()) notes.push_back(c.spec.name() + ": " + c.parity->note);
    if (c.loss_vs_single) {
      notes.push_back(c.spec.name() + fmt(": loss %.4f", c.loss_vs_single->loss) +
                      fmt(" against single's %.4f", c.loss_vs_single->reference_loss) + " after " +
                      std::to_string(c.loss_vs_single->samples_seen) + " samples");
    }
    if (!c.repetitions.empty() && c.repetitions.back().async) {
      const auto& a = *c.repetitions.back().async;
      notes.push_back(c.spec.name() + ": " + a.mode + ", " + std::to_string(a.workers) + " workers, sync every " +
                      std::to_string(a.sync_every) + fmt(" step(s); staleness median %.1f", a.staleness_median) +
                      ", max " + std::to_string(a.staleness_max) + " updates");
    }
    rows.push_back(row);
  }

  std::vector<size_t> width(header.size());
  for (size_t i = 0; i < header.size(); ++i) width[i] = header[i].size();
  for (const auto& r : rows) {
    for (size_t i = 0; i < r.size(); ++i) width[i] = std::max(width[i], r[i].size());
  }
  std::ostringstream out;
  auto print_row = [&](const std::vector<std::string>& r) {
    for (size_t i = 0; i < r.size(); ++i) {
      const bool left = i < 2;  // names and status read left-aligned, numbers right-aligned
      const std::string pad(width[i] - r[i].size(), ' ');
      out << (i ? "  " : "") << (left ? r[i] + pad : pad + r[i]);
    }
    out << '\n';
  };
  print_row(header);
  size_t total = 0;
  for (size_t w : width) total += w + 2;
  out << std::string(total - 2, '-') << '\n';
  for (const auto& r : rows) print_row(r);
  bool any_noisy = false;
  for (const auto& c : record.cases) any_noisy = any_noisy || c.noisy;
  if (any_noisy) {
    out << "  * noisy: repetitions vary more than --max-cv " << fmt("%.0f%%", record.settings.max_cv * 100)
        << "; read those numbers with care (more --steps or --repetitions, a quieter machine)\n";
  }
  bool any_unresolved = false;
  for (const auto& c : record.cases) any_unresolved = any_unresolved || c.unresolved;
  if (any_unresolved) {
    out << "  ! unresolved: --max-time " << fmt("%g", record.settings.max_time_seconds)
        << " s ran out before the lower-quartile step was within +-"
        << fmt("%g%%", record.settings.target_precision * 100)
        << " (95% interval over repetitions); read those numbers as that precise only\n";
  }
  for (const auto& n : notes) out << "  " << n << '\n';
  if (!record.interruption.empty()) out << "  " << record.interruption << '\n';
  // Where the peak went: what the strategy holds between steps, by kind, and the rest.
  std::vector<std::string> by_kind;
  for (const auto& c : record.cases) {
    if (c.repetitions.empty() || c.repetitions.back().memory.empty()) continue;
    const auto& m = c.repetitions.back().memory[0];
    const auto other = other_peak_bytes(m);
    if (!other) continue;
    by_kind.push_back(c.spec.name() + ": " + bytes(*m.peak_allocated_bytes) + " = parameters " +
                      bytes(*m.parameter_bytes) + " + gradients " + bytes(*m.gradient_bytes) +
                      " + optimizer state " + bytes(*m.optimizer_state_bytes) + " + other " + bytes(*other));
  }
  if (!by_kind.empty()) {
    out << "memory on device 0 at its peak (held between steps, by kind; other: the rest at the peak, what forward "
           "saved and temporaries):\n";
  }
  for (const auto& line : by_kind) out << "  " << line << '\n';
  // Activations per device: what forward left alive for backward, at the end of forward (when no
  // gradient exists yet, so not a part of the sum above, whose peak is usually in backward).
  std::vector<std::string> activations;
  for (const auto& c : record.cases) {
    if (c.repetitions.empty()) continue;
    std::string per_device;
    bool any = false;
    for (const auto& m : c.repetitions.back().memory) {
      per_device += std::string(per_device.empty() ? "" : ", ") + (m.activation_bytes ? bytes(*m.activation_bytes) : "cannot tell");
      any = any || m.activation_bytes.has_value();
    }
    if (any) activations.push_back(c.spec.name() + ": " + per_device);
  }
  if (!activations.empty()) {
    const auto& policy = record.settings.strategy_options.levers.activation_checkpointing;
    out << "activations per device (alive at the end of forward; activation checkpointing: " << policy.to_string()
        << "):\n";
  }
  for (const auto& line : activations) out << "  " << line << '\n';
  const auto why = explain(record);
  if (!why.empty()) out << "why:\n";
  for (const auto& e : why) {
    for (const auto& line : e.lines) out << "  " << line << '\n';
  }
  return out.str();
}

void TableSink::on_finish(const RunRecord& record) { out_ << format_table(record) << std::flush; }

}  // namespace ddpbench
