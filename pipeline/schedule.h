#pragma once
// Pipeline schedules as data: which forward and backward, of which micro-batch and which of its
// stages, each rank runs in what order (naive, GPipe, 1F1B, interleaved 1F1B), the bubble each is
// known to leave (PARALLEL.md's table), and a timeline of a schedule with given stage times, which
// checks that a schedule can run at all and what it holds in flight. No tensors: the `pp` strategy
// runs these lists; tests and the projection reason about them.
#include <optional>
#include <string>
#include <vector>

namespace ddpbench::pipeline {

enum class ScheduleKind { Naive, GPipe, OneFOneB, Interleaved1F1B };

const char* to_string(ScheduleKind kind);  // "naive", "gpipe", "1f1b", "interleaved-1f1b"
std::optional<ScheduleKind> parse_schedule(const std::string& name);

// p ranks in a row, m micro-batches a step, V model chunks a rank (the interleaved schedule's
// virtual stages: rank r holds stages r, r + p, ..., r + (V - 1) p of the p V stages).
struct PipelineShape {
  int ranks = 1;
  int microbatches = 1;
  int chunks_per_rank = 1;
  int stages() const { return ranks * chunks_per_rank; }
};

// One thing a rank does: a micro-batch's forward or backward through one of its chunks. Forward
// of stage k > 0 receives its input from stage k - 1 first and, below the last stage, sends its
// output to stage k + 1 after; backward the other way round.
struct Action {
  enum class Kind { Forward, Backward };
  Kind kind = Kind::Forward;
  int microbatch = 0;
  int chunk = 0;  // 0 .. V - 1 on this rank
  int stage(int rank, int ranks) const { return chunk * ranks + rank; }
  bool operator==(const Action& o) const { return kind == o.kind && microbatch == o.microbatch && chunk == o.chunk; }
};

// Why `shape` cannot run under `kind`, naming the flag to change, or nothing: naive takes one
// batch (no micro-batches); interleaved takes V >= 2 and micro-batches in whole multiples of the
// ranks (Megatron's schedule needs both); the others take V = 1.
std::optional<std::string> invalid_shape(ScheduleKind kind, const PipelineShape& shape);

// Rank `rank`'s actions in order, every micro-batch's forward and backward through each of its
// chunks once. Throws std::invalid_argument with invalid_shape's words.
std::vector<Action> rank_actions(ScheduleKind kind, const PipelineShape& shape, int rank);

// The idle share of a step with equal stages: (p - 1) / (m + p - 1) for naive (m = 1), GPipe and
// 1F1B; (p - 1) / (V m + p - 1) interleaved.
double expected_bubble(ScheduleKind kind, const PipelineShape& shape);

// The schedule played with every stage's forward taking `forward_seconds` and backward
// `backward_seconds` (a stage being one chunk: a chunk's times are these over V for the same
// model), sends free and never blocking: the timeline the schedule allows at best.
struct Timeline {
  double step_seconds = 0;
  std::vector<double> busy_seconds;      // per rank
  std::vector<int> peak_in_flight;       // per rank: the most micro-batch chunks forwarded and
                                         // not yet backwarded at once (activations held)
  double bubble() const;                 // idle share over every rank
};
// Throws std::logic_error where the schedule cannot finish (a rank waits on an action that waits on
// it): a schedule with that defect would hang real ranks.
Timeline simulate(ScheduleKind kind, const PipelineShape& shape, double forward_seconds, double backward_seconds);

}  // namespace ddpbench::pipeline
