"""Activations per device at another per-device batch, from what a file measured, and the two
memory levers as ways to fit (docs/memory.md, "The projection").

What a forward leaves alive for its backward has a part that grows with the micro-batch (every
layer's saved outputs) and a part that does not (a fused loss's chunk, what a unit keeps whatever
the batch). One measured batch cannot tell them apart; two can. So the model is a line through the
file's cases of the workload that ran one model per device (single, ddp, zero1, zero2, fsdp), each at
its own per-device micro-batch: fitted where they ran two micro-batches or more, else through the
part the workload's facts say does not grow (`fixed_activation_bytes`: gpt2's fused loss keeps its
output weight's gradient), zero for most (then all of it grows with the batch, an overestimate when
the batch grows and an underestimate when it shrinks, said in the assumptions). It keeps the
measured dtype, and the measured sequence length unless --seq-len reads the cases at another first
(sequence.py).

Levers:
- `--grad-accum K`: each micro-batch is b/K, so activations are the line at b/K. ddp, zero1 and
  zero2 reduce once a step (on the last micro-batch), so their traffic is unchanged; fsdp gathers
  and reduce-scatters every micro-batch, K times a step. Memory falls by what the activations fall.
- `--activation-checkpointing`: what a checkpointed unit keeps (its input) is not in a plain run's
  figures; a file measured with it (`ddpbench-project --checkpointed RUN.json`) gives its own line,
  and its recompute phase the time it adds: per sample a rank, as measured, scaled like compute.
"""
from dataclasses import dataclass
from typing import Optional

# Strategies whose device 0 runs the whole model on its own micro-batch: their activations lie on
# one line. dp's device 0 holds the gathered outputs, pp's hold micro-batches in flight, tp's a
# split of them, hogwild's are not measured.
ONE_MODEL_PER_DEVICE = ("single", "ddp", "zero1", "zero2", "fsdp")


def micro_batch(case):
    """The per-device micro-batch a case's forward ran on: its per-rank batch over its file's
    --grad-accum."""
    return case.per_rank_batch / max(1, int(case.levers.get("grad_accum") or 1))


@dataclass
class ActivationLine:
    """Activation bytes per device = fixed + per_sample x micro-batch."""
    fixed: float
    per_sample: float
    points: list          # [(case name, micro-batch, bytes)] it was fitted to
    checkpointing: str    # the file's --activation-checkpointing: the line holds under it only

    def at(self, batch):
        return self.fixed + self.per_sample * batch

    def describe(self, workload):
        mib = 2 ** 20
        said = ", ".join(f"{name} at {b:g}" for name, b, _ in self.points)
        lever = "" if self.checkpointing in ("", "none") else f", under --activation-checkpointing {self.checkpointing}"
        if self.fixed == 0.0 and len({b for _, b, _ in self.points}) < 2:
            return (f"activations ({workload}): {self.per_sample / mib:.3g} MiB a sample a device, proportional to "
                    f"the micro-batch from one measured batch ({said}{lever}); a part that does not grow with the "
                    f"batch (a fused loss's chunk) is scaled too: over when the batch grows, under when it shrinks")
        if len({b for _, b, _ in self.points}) < 2:
            return (f"activations ({workload}): {self.fixed / mib:.3g} MiB (what the workload's facts say forward "
                    f"keeps whatever the batch) + {self.per_sample / mib:.3g} MiB a sample a device from one measured "
                    f"batch ({said}{lever})")
        return (f"activations ({workload}): {self.fixed / mib:.3g} MiB + {self.per_sample / mib:.3g} MiB a sample a "
                f"device, a line through {said} (samples a micro-batch{lever})")


def known_fixed(case):
    """What the case's workload facts say forward keeps whatever the batch (0 where they say nothing)."""
    value = (case.facts or {}).get("fixed_activation_bytes")
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


def fit(cases, workload):
    """The workload's ActivationLine from the file's cases, or None where none measured activations."""
    points = [(c.name, micro_batch(c), float(c.activation_bytes)) for c in cases
              if c.workload == workload and c.strategy in ONE_MODEL_PER_DEVICE
              and c.activation_bytes is not None and c.activation_bytes > 0 and micro_batch(c) > 0]
    if not points:
        return None
    checkpointing = str(next(c for c in cases if c.workload == workload).levers.get("activation_checkpointing") or "none")
    xs = [b for _, b, _ in points]
    ys = [a for _, _, a in points]
    if len(set(xs)) < 2:
        fixed = min([known_fixed(c) for c in cases if c.workload == workload] + ys)
        return ActivationLine(fixed, (sum(ys) - fixed * len(ys)) / sum(xs), points, checkpointing)
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    fixed = my - slope * mx
    if slope < 0 or fixed < 0:
        # Noise or strategies' differences (ddp's hooks) outweigh the batch's: through zero, the
        # least-squares slope of bytes = slope x batch.
        return ActivationLine(0.0, sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs), points, checkpointing)
    return ActivationLine(fixed, slope, points, checkpointing)


@dataclass
class LeverOption:
    """One lever at one projected row: the memory it would leave, and what it costs, in words."""
    lever: str                         # "--grad-accum 4", "--activation-checkpointing full"
    memory_per_device_bytes: float
    activation_bytes: float
    throughput: Optional[float]        # samples/s where projected, else None
    cost: str                          # the throughput and what it assumes, or why there is none, short

    def to_json(self):
        return dict(self.__dict__)


def grad_accum_options(p, line, batch, current=1, max_k=64):
    """`--grad-accum K` for K = 2, 4, 8 ... times the file's own `current` K, while b/K is a whole
    number of samples, at projection p (its memory and activations at micro-batch `batch`)."""
    out = []
    k = 2
    while k <= max_k and batch % k == 0 and batch // k >= 1:
        saved = line.at(batch) - line.at(batch // k)
        if p.strategy == "fsdp":
            throughput, cost = None, (f"throughput not projected: every unit gathered and reduce-scattered "
                                      f"{current * k} times a step")
        else:
            throughput = p.samples_per_second
            cost = f"{throughput:.4g} samples/s if micro-batches of {batch // k} compute as fast a sample"
        out.append(LeverOption(f"--grad-accum {current * k}", p.memory_per_device_bytes - saved, line.at(batch // k),
                               throughput, cost))
        k *= 2
    return out


@dataclass
class Checkpointed:
    """What a run under --activation-checkpointing measured of one workload: its activations' line
    and its recompute time a sample a rank, by strategy (the one-model-per-device cases')."""
    policy: str
    line: ActivationLine
    recompute_per_sample: dict   # strategy -> (seconds a sample a rank, the case's world, its name)

    def recompute_for(self, strategy):
        """(seconds a sample a rank, world, case name) of `strategy`'s case, else of the first case."""
        return self.recompute_per_sample.get(strategy) or next(iter(self.recompute_per_sample.values()))


def fit_checkpointed(cases, workload):
    """The workload's Checkpointed from a checkpointed run's cases, or None where it has no case of
    one model per device that measured its activations and recompute."""
    line = fit(cases, workload)
    if line is None or line.checkpointing in ("", "none"):
        return None
    recompute = {}
    for c in cases:
        if (c.workload == workload and c.strategy in ONE_MODEL_PER_DEVICE and c.recompute_s > 0
                and c.strategy not in recompute):
            recompute[c.strategy] = (c.recompute_s / c.per_rank_batch, c.world, c.name)
    return Checkpointed(line.checkpointing, line, recompute) if recompute else None


def checkpointing_option(p, plain_line, checkpointed, batch, per_rank_batch, contention):
    """--activation-checkpointing POLICY at projection p (its activations at micro-batch `batch` on
    `plain_line`, `per_rank_batch` samples a rank a step): activations on the checkpointed line, the
    peak down by as much, the step longer by the recompute (per sample a rank as measured, times
    `contention(world it was measured at)`, the projection's compute scale). None where it keeps as
    much as the plain run or more (mlp's one-layer units: each keeps its input, what its ReLU saved
    anyway), so it is no lever."""
    kept = checkpointed.line.at(batch)
    if kept >= plain_line.at(batch):
        return None
    per_sample, world, name = checkpointed.recompute_for(p.strategy)
    recompute_s = per_sample * per_rank_batch * contention(world)
    step_s = p.step_ms / 1e3
    throughput = p.samples_per_second * step_s / (step_s + recompute_s)
    return LeverOption(f"--activation-checkpointing {checkpointed.policy}",
                       p.memory_per_device_bytes - (plain_line.at(batch) - kept), kept, throughput,
                       f"{throughput:.4g} samples/s: {recompute_s * 1e3:.3g} ms of recompute a step, as {name} measured it")


LEVERS_NOTE = ("memory levers: --grad-accum K runs K micro-batches of b/K a step, activations at b/K on the activations' line (assumptions) "
               "and the rest of the peak as measured; ddp, zero1 and zero2 reduce once a step as now, their throughput "
               "taken as projected if the smaller micro-batches compute as fast a sample (small ones on a GPU do not); "
               "fsdp gathers and reduce-scatters every micro-batch, its throughput is not projected; ddpbench "
               "--grad-accum K measures either. Activation checkpointing is considered where --checkpointed gives a run "
               "under it: its activations' line and its recompute time, scaled like compute; else not (what a "
               "checkpointed unit keeps is not in a plain run's figures)")
