#include "pipeline/schedule.h"

#include <algorithm>
#include <stdexcept>

namespace ddpbench::pipeline {
namespace {

Action forward(int microbatch, int chunk = 0) { return {Action::Kind::Forward, microbatch, chunk}; }
Action backward(int microbatch, int chunk = 0) { return {Action::Kind::Backward, microbatch, chunk}; }

// PipeDream-flush as Megatron runs it: rank r forwards p - r - 1 micro-batches ahead, then
// alternates one forward and one backward, then drains the backwards. At most p - r micro-batches
// are in flight on rank r.
std::vector<Action> one_f_one_b(const PipelineShape& s, int rank) {
  const int warmup = std::min(s.ranks - rank - 1, s.microbatches);
  std::vector<Action> out;
  for (int i = 0; i < warmup; ++i) out.push_back(forward(i));
  const int steady = s.microbatches - warmup;
  for (int i = 0; i < steady; ++i) {
    out.push_back(forward(warmup + i));
    out.push_back(backward(i));
  }
  for (int i = steady; i < s.microbatches; ++i) out.push_back(backward(i));
  return out;
}

// Megatron's interleaved schedule (arXiv 2104.04473, section 2.2): V chunks a rank, micro-batches
// taken p at a time through chunk 0, then the same p through chunk 1, and so on; backward visits the
// chunks in reverse. Virtual micro-batch k of the rank's V m is micro-batch (k / (p V)) p + k mod p
// in chunk (k / p) mod V (forward) or V - 1 - that (backward).
std::vector<Action> interleaved(const PipelineShape& s, int rank) {
  const int p = s.ranks, v = s.chunks_per_rank, total = s.microbatches * v;
  const auto virtual_action = [&](int k, bool is_forward) {
    const int in_group = k % (p * v);
    const int microbatch = (k / (p * v)) * p + in_group % p;
    const int chunk = in_group / p;
    return is_forward ? forward(microbatch, chunk) : backward(microbatch, v - 1 - chunk);
  };
  // Where m = p every forward is warm-up (Megatron's own special case): the first backward needs
  // the last chunk's forward of micro-batch 0, which comes after all the others.
  const int warmup = s.microbatches == p ? total : std::min((p - rank - 1) * 2 + (v - 1) * p, total);
  std::vector<Action> out;
  for (int k = 0; k < warmup; ++k) out.push_back(virtual_action(k, true));
  const int steady = total - warmup;
  for (int k = 0; k < steady; ++k) {
    out.push_back(virtual_action(warmup + k, true));
    out.push_back(virtual_action(k, false));
  }
  for (int k = steady; k < total; ++k) out.push_back(virtual_action(k, false));
  return out;
}

}  // namespace

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Naive: return "naive";
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneB: return "1f1b";
    case ScheduleKind::Interleaved1F1B: return "interleaved-1f1b";
  }
  return "?";
}

std::optional<ScheduleKind> parse_schedule(const std::string& name) {
  for (const auto kind : {ScheduleKind::Naive, ScheduleKind::GPipe, ScheduleKind::OneFOneB,
                          ScheduleKind::Interleaved1F1B}) {
    if (name == to_string(kind)) return kind;
  }
  return std::nullopt;
}

std::optional<std::string> invalid_shape(ScheduleKind kind, const PipelineShape& s) {
  if (s.ranks < 1 || s.microbatches < 1 || s.chunks_per_rank < 1) {
    return "--world-size, --microbatches and --stages-per-rank must each be at least 1";
  }
  if (kind == ScheduleKind::Naive && s.microbatches != 1) {
    return "--pp-schedule naive runs the whole batch at once: --microbatches does not apply (" +
           std::to_string(s.microbatches) + " given)";
  }
  if (kind == ScheduleKind::Interleaved1F1B) {
    if (s.chunks_per_rank < 2) return "--pp-schedule interleaved-1f1b needs --stages-per-rank 2 or more";
    if (s.microbatches % s.ranks != 0) {
      return "--pp-schedule interleaved-1f1b takes micro-batches in groups of the " + std::to_string(s.ranks) +
             " ranks: --microbatches " + std::to_string(s.microbatches) + " is not a multiple of it";
    }
  } else if (s.chunks_per_rank != 1) {
    return std::string("--stages-per-rank applies to --pp-schedule interleaved-1f1b only, not ") + to_string(kind);
  }
  return std::nullopt;
}

std::vector<Action> rank_actions(ScheduleKind kind, const PipelineShape& shape, int rank) {
  if (const auto why = invalid_shape(kind, shape)) throw std::invalid_argument(*why);
  if (rank < 0 || rank >= shape.ranks) throw std::invalid_argument("rank " + std::to_string(rank) + " of " +
                                                                   std::to_string(shape.ranks));
  switch (kind) {
    case ScheduleKind::Naive:
    case ScheduleKind::GPipe: {
      // Every forward, then every backward, in micro-batch order (torch.distributed.pipelining's
      // ScheduleGPipe); naive is the same with the whole batch as one micro-batch.
      std::vector<Action> out;
      for (int i = 0; i < shape.microbatches; ++i) out.push_back(forward(i));
      for (int i = 0; i < shape.microbatches; ++i) out.push_back(backward(i));
      return out;
    }
    case ScheduleKind::OneFOneB: return one_f_one_b(shape, rank);
    case ScheduleKind::Interleaved1F1B: return interleaved(shape, rank);
  }
  throw std::logic_error("rank_actions: unknown schedule");
}

double expected_bubble(ScheduleKind kind, const PipelineShape& shape) {
  const double p = shape.ranks, m = shape.microbatches;
  const double v = kind == ScheduleKind::Interleaved1F1B ? shape.chunks_per_rank : 1;
  return (p - 1) / (v * m + p - 1);
}

double Timeline::bubble() const {
  double busy = 0;
  for (const double b : busy_seconds) busy += b;
  const double capacity = step_seconds * static_cast<double>(busy_seconds.size());
  return capacity > 0 ? 1.0 - busy / capacity : 0.0;
}

Timeline simulate(ScheduleKind kind, const PipelineShape& shape, double forward_seconds, double backward_seconds) {
  const int p = shape.ranks, stages = shape.stages(), m = shape.microbatches;
  std::vector<std::vector<Action>> lists;
  for (int r = 0; r < p; ++r) lists.push_back(rank_actions(kind, shape, r));
  constexpr double kNotYet = -1;
  // When each micro-batch's forward and backward through each stage ended.
  std::vector<std::vector<double>> forward_done(m, std::vector<double>(stages, kNotYet));
  std::vector<std::vector<double>> backward_done(m, std::vector<double>(stages, kNotYet));
  std::vector<std::size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  Timeline t;
  t.busy_seconds.assign(p, 0.0);
  t.peak_in_flight.assign(p, 0);
  std::vector<int> in_flight(p, 0);
  // Each pass runs every action whose input is there; the times are each action's earliest start,
  // whatever order the passes find them in (a longest path through the schedule's dependencies).
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      while (next[r] < lists[r].size()) {
        const Action& a = lists[r][next[r]];
        const int k = a.stage(r, p);
        double ready = 0;
        if (a.kind == Action::Kind::Forward) {
          ready = k == 0 ? 0.0 : forward_done[a.microbatch][k - 1];
        } else {
          // Its own forward first; the gradient from the stage after it, or the loss at the last.
          ready = forward_done[a.microbatch][k];
          if (k + 1 < stages) {
            const double gradient = backward_done[a.microbatch][k + 1];
            ready = ready < 0 || gradient < 0 ? kNotYet : std::max(ready, gradient);
          }
        }
        if (ready < 0) break;
        const double seconds = a.kind == Action::Kind::Forward ? forward_seconds : backward_seconds;
        const double end = std::max(free_at[r], ready) + seconds;
        (a.kind == Action::Kind::Forward ? forward_done : backward_done)[a.microbatch][k] = end;
        free_at[r] = end;
        t.busy_seconds[r] += seconds;
        in_flight[r] += a.kind == Action::Kind::Forward ? 1 : -1;
        t.peak_in_flight[r] = std::max(t.peak_in_flight[r], in_flight[r]);
        t.step_seconds = std::max(t.step_seconds, end);
        ++next[r];
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    if (next[r] < lists[r].size()) {
      throw std::logic_error(std::string(to_string(kind)) + " with " + std::to_string(p) + " ranks and " +
                             std::to_string(m) + " micro-batches cannot finish: rank " + std::to_string(r) +
                             " waits at its action " + std::to_string(next[r]) + " on one that waits on it");
    }
  }
  return t;
}

}  // namespace ddpbench::pipeline
