"""Pipeline schedules played with given stage times: pipeline/schedule.cpp's four schedules (the
actions each rank runs, in order) and its timeline, here with each stage's own forward and backward
time and a hop's cost on every dependency between two ranks, so that the projection reads the step
and the micro-batches each rank holds from the schedule itself rather than from a formula that
fits equal stages only.

The orders are ddpbench's own (tests/python/test_projection_pipeline.py holds them to schedule.cpp's
bubbles and in-flight counts); change the two together.
"""
from dataclasses import dataclass
from typing import List

SCHEDULES = ("naive", "gpipe", "1f1b", "interleaved-1f1b")


@dataclass(frozen=True)
class Action:
    forward: bool
    microbatch: int
    chunk: int = 0   # 0 .. V - 1 on its rank: stage chunk * ranks + rank

    def stage(self, rank, ranks):
        return self.chunk * ranks + rank


def rank_actions(schedule, ranks, microbatches, chunks=1, rank=0):
    """Rank `rank`'s actions in order (schedule.cpp's rank_actions)."""
    p, m, v = ranks, microbatches, chunks
    if schedule in ("naive", "gpipe"):
        return [Action(True, i) for i in range(m)] + [Action(False, i) for i in range(m)]
    if schedule == "1f1b":
        # PipeDream-flush as Megatron runs it: p - r - 1 forwards ahead, then one forward, one backward.
        warmup = min(p - rank - 1, m)
        out = [Action(True, i) for i in range(warmup)]
        for i in range(m - warmup):
            out += [Action(True, warmup + i), Action(False, i)]
        return out + [Action(False, i) for i in range(m - warmup, m)]
    if schedule == "interleaved-1f1b":
        total = m * v

        def virtual(k, forward):
            in_group = k % (p * v)
            mb, chunk = (k // (p * v)) * p + in_group % p, in_group // p
            return Action(forward, mb, chunk if forward else v - 1 - chunk)

        warmup = total if m == p else min((p - rank - 1) * 2 + (v - 1) * p, total)
        out = [virtual(k, True) for k in range(warmup)]
        for k in range(total - warmup):
            out += [virtual(warmup + k, True), virtual(k, False)]
        return out + [virtual(k, False) for k in range(total - warmup, total)]
    raise ValueError(f"schedule {schedule!r}: one of {', '.join(SCHEDULES)}")


@dataclass
class Timeline:
    step_s: float
    busy_s: List[float]          # per rank
    peak_in_flight: List[int]    # per rank: chunk forwards not yet backwarded, at most

    @property
    def bubble(self):
        capacity = self.step_s * len(self.busy_s)
        return 1.0 - sum(self.busy_s) / capacity if capacity > 0 else 0.0


def simulate(schedule, ranks, microbatches, forward_s, backward_s, hop_s=0.0, chunks=1):
    """The schedule played: stage k's forward takes forward_s[k] and its backward backward_s[k] (k over
    the ranks x chunks stages), an activation or its gradient reaches another rank hop_s after it is
    sent, and sends never block the sender (schedule.cpp's simulate, with per-stage times and hops)."""
    p, m, stages = ranks, microbatches, ranks * chunks
    if len(forward_s) != stages or len(backward_s) != stages:
        raise ValueError(f"{stages} stages need {stages} forward and backward times")
    lists = [rank_actions(schedule, p, m, chunks, r) for r in range(p)]
    done = {True: [[None] * stages for _ in range(m)], False: [[None] * stages for _ in range(m)]}
    next_action, free_at = [0] * p, [0.0] * p
    busy, in_flight, peak = [0.0] * p, [0] * p, [0] * p
    step, progress = 0.0, True
    hop = hop_s if p > 1 else 0.0   # one rank: every stage on it, nothing crosses
    while progress:
        progress = False
        for r in range(p):
            while next_action[r] < len(lists[r]):
                a = lists[r][next_action[r]]
                k = a.stage(r, p)
                if a.forward:
                    before = done[True][a.microbatch][k - 1] if k > 0 else 0.0
                    ready = None if before is None else before + (hop if k > 0 else 0.0)
                else:
                    ready = done[True][a.microbatch][k]
                    if ready is not None and k + 1 < stages:
                        gradient = done[False][a.microbatch][k + 1]
                        ready = None if gradient is None else max(ready, gradient + hop)
                if ready is None:
                    break
                seconds = forward_s[k] if a.forward else backward_s[k]
                end = max(free_at[r], ready) + seconds
                done[a.forward][a.microbatch][k] = end
                free_at[r] = end
                busy[r] += seconds
                in_flight[r] += 1 if a.forward else -1
                peak[r] = max(peak[r], in_flight[r])
                step = max(step, end)
                next_action[r] += 1
                progress = True
    stuck = [r for r in range(p) if next_action[r] < len(lists[r])]
    if stuck:
        raise ValueError(f"{schedule} with {p} ranks and {m} micro-batches cannot finish: rank {stuck[0]} waits "
                         f"at its action {next_action[stuck[0]]} on one that waits on it")
    return Timeline(step, busy, peak)
