"""Activations per device at another per-device batch, from what a file measured, and the two
memory levers as ways to fit (docs/memory.md, "The projection").

What a forward leaves alive for its backward has a part that grows with the micro-batch (every
layer's saved outputs) and a part that does not (a fused loss's chunk, what a unit keeps whatever
the batch). One measured batch cannot tell them apart; two can. So the model is a line through the
file's cases of the workload that ran one model per device (single, ddp, zero1, zero2, fsdp), each at
its own per-device micro-batch: fitted where they ran two micro-batches or more, else through zero
(all of it grows with the batch, an overestimate when the batch grows and an underestimate when it
shrinks, said in the assumptions). It keeps the measured sequence length and dtype.

Levers:
- `--grad-accum K`: each micro-batch is b/K, so activations are the line at b/K. ddp, zero1 and
  zero2 reduce once a step (on the last micro-batch), so their traffic is unchanged; fsdp gathers
  and reduce-scatters every micro-batch, K times a step. Memory falls by what the activations fall.
- `--activation-checkpointing`: what a checkpointed unit keeps (its input) is not in a plain run's
  figures; a file measured with it (`--levers FILE`) gives the ratio, applied at every batch.
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
        return (f"activations ({workload}): {self.fixed / mib:.3g} MiB + {self.per_sample / mib:.3g} MiB a sample a "
                f"device, a line through {said} (samples a micro-batch{lever}); the measured sequence length")


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
        return ActivationLine(0.0, sum(ys) / sum(xs), points, checkpointing)
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


def grad_accum_options(p, line, batch, max_k=64):
    """`--grad-accum K` for K = 2, 4, 8 ... while b/K is a whole number of samples, at projection p
    (its memory and activations at micro-batch `batch`)."""
    out = []
    k = 2
    while k <= max_k and batch % k == 0 and batch // k >= 1:
        saved = line.at(batch) - line.at(batch // k)
        if p.strategy == "fsdp":
            throughput, cost = None, f"throughput not projected: every unit gathered and reduce-scattered {k} times a step"
        else:
            throughput = p.samples_per_second
            cost = f"{throughput:.4g} samples/s if micro-batches of {batch // k} compute as fast a sample"
        out.append(LeverOption(f"--grad-accum {k}", p.memory_per_device_bytes - saved, line.at(batch // k),
                               throughput, cost))
        k *= 2
    return out


LEVERS_NOTE = ("memory levers: --grad-accum K runs K micro-batches of b/K a step, activations at b/K on the activations' line (assumptions) "
               "and the rest of the peak as measured; ddp, zero1 and zero2 reduce once a step as now, their throughput "
               "taken as projected if the smaller micro-batches compute as fast a sample (small ones on a GPU do not); "
               "fsdp gathers and reduce-scatters every micro-batch, its throughput is not projected; ddpbench "
               "--grad-accum K measures either. Activation checkpointing is not projected: what a checkpointed unit "
               "keeps is not in a plain run's figures (ddpbench --activation-checkpointing full measures it)")
