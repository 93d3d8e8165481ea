"""A step's collectives on one communication stream, against the compute they hide behind: what is
exposed, with a shaped link's token bucket (collectives.ShapedLink) kept along the way.

Pure timing: the costs come in as functions of bytes (collectives.py at the projected world and
network), the compute as seconds already scaled (model.Projector); nothing here reads a file.
- replay_buckets: ddp's all-reduces or ZeRO's reduce-scatters, bucket by bucket, each starting when
  its gradients are ready and the bucket before it is done;
- fsdp_exposed: FSDP's unit gathers in forward (each next one behind the unit before it, with
  prefetch and overlap) and its gathers and reduce-scatters in backward (last unit first).
Where a collective follows an idle link, the bucket has refilled for as long as the link idled.
"""
from dataclasses import dataclass
from typing import List


def replay_buckets(buckets, ready_scale, backward_s, cost_of, link, scale):
    """The buckets' collectives one after another on one stream, each starting when its bucket is
    ready (its measured ready time times ready_scale) and the one before is done: (their time, what
    runs past the end of backward, their algorithms, when the last one ends)."""
    clock, comm, algorithms = 0.0, 0.0, []
    for b in buckets:
        cost = cost_of(b.nbytes)
        start = max(clock, b.ready_s * ready_scale)
        link.idle(start - clock)
        seconds = link.send(cost) * scale
        clock = start + seconds
        comm += seconds
        algorithms.append(cost.algorithm)
    return comm, max(0.0, clock - backward_s), algorithms


@dataclass
class FsdpStep:
    """One FSDP step as model.Projector.fsdp sets it up: each wrap unit's share of the model's bytes
    (build order, the root apart), its forward and backward seconds, and the flags it ran with."""
    units: List[float]
    root: float
    forward: List[float]
    backward: List[float]
    reshard: bool
    prefetch: bool
    overlap: bool


def fsdp_exposed(step, gather, scatter, link, scale):
    """(all collectives' seconds, the exposed part) of an FSDP step. gather(share) and
    scatter(share) are the collectives' Costs for a share of the parameters or gradients.

    Forward: the root's gather and the first unit's are waited for; with prefetch and overlap unit
    i's gather is issued when unit i-1 starts computing and hides behind it, else it is waited for.
    Backward, last unit first: each unit gathered again when resharded; with overlap, unit k's
    reduce-scatter and the next unit's gather share the stream behind a unit's backward (the gather
    first, prefetched); without overlap every collective is on the step's thread; the last unit's
    reduce-scatter and the root's come after."""
    comm = [0.0]

    def send(cost_of, share, idle):
        link.idle(idle)
        if not share:
            return 0.0
        seconds = link.send(cost_of(share)) * scale
        comm[0] += seconds
        return seconds

    units, fwd, bwd, n = step.units, step.forward, step.backward, len(step.units)
    hides = step.prefetch and step.overlap
    exposed = send(gather, step.root, 0.0)
    g = [send(gather, units[0], 0.0)] if n else []
    exposed += sum(g)
    for i in range(1, n):
        if hides:
            # Issued as unit i-1 starts: the stream idled while unit i-2 outlasted gather i-1.
            g.append(send(gather, units[i], max(0.0, fwd[i - 2] - g[i - 1]) if i >= 2 else 0.0))
            exposed += max(0.0, g[i] - fwd[i - 1])
        else:
            g.append(send(gather, units[i], fwd[i - 1]))
            exposed += g[i]
    # The last unit's forward, and whatever the stream idled before it, pass with the link idle.
    tail = (fwd[n - 1] + (max(0.0, fwd[n - 2] - g[n - 1]) if hides and n >= 2 else 0.0)) if n else 0.0
    order = units[::-1]
    bwd_of = bwd[::-1]  # order[j]'s backward

    def again(j, idle):
        return send(gather, order[j], idle) if step.reshard else send(gather, 0.0, idle)

    if not n:
        return comm[0], exposed + send(scatter, step.root, tail)
    if step.overlap:
        exposed += again(0, tail)
        idle = 0.0
        for i in range(1, n):
            if step.prefetch:
                pending = again(i, idle) + send(scatter, order[i - 1], 0.0)
                exposed += max(0.0, pending - bwd_of[i - 1])
                idle = max(0.0, bwd_of[i - 1] - pending)
            else:
                reduce = send(scatter, order[i - 1], idle)
                exposed += max(0.0, reduce - bwd_of[i - 1]) + again(i, max(0.0, bwd_of[i - 1] - reduce))
                idle = 0.0
        # The last unit's backward hides nothing; its reduce-scatter comes after it.
        exposed += send(scatter, order[-1], idle + bwd_of[-1]) + send(scatter, step.root, 0.0)
    else:
        exposed += again(0, tail)
        for j in range(n):
            exposed += send(scatter, order[j], bwd_of[j])
            if j + 1 < n:
                exposed += again(j + 1, 0.0)
        exposed += send(scatter, step.root, 0.0)
    return comm[0], exposed

