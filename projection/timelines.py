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
    """(all collectives' seconds, the exposed part) of an FSDP step, played as ddpbench's fsdp runs it
    (collectives/sharded_units.cpp): one compute thread and one communication stream that runs its
    collectives in the order they are posted. gather(share) and scatter(share) are the collectives'
    Costs for a share of the parameters or gradients.

    Forward: the root's gather and the first unit's are posted as the step starts and the root's is
    waited for; with prefetch and overlap, unit i + 1's gather is posted as unit i starts computing,
    else as unit i + 1 needs it. Backward, last unit first: a unit resharded after forward is
    gathered again before its backward (waited for where not prefetched), and with prefetch the next
    unit's gather is posted as a unit's backward starts; a unit's reduce-scatter is posted when its
    backward ends, so it runs behind the next unit's backward; the root's after the last. The step
    waits for every reduce-scatter. Without overlap every collective is waited for where it is
    posted. Exposed: the step's compute time and its wait beyond the units' compute."""
    units, fwd, bwd, n = step.units, step.forward, step.backward, len(step.units)
    ahead = step.prefetch and step.overlap  # a collective posted before it is needed, run behind compute
    stream = {"free": 0.0, "comm": 0.0}

    def post(cost_of, share, at):
        """A collective posted at `at` on the stream: when it ends (`at` for no bytes)."""
        if not share:
            return at
        start = max(at, stream["free"])
        link.idle(start - stream["free"])
        seconds = link.send(cost_of(share)) * scale
        stream["comm"] += seconds
        stream["free"] = start + seconds
        return stream["free"]

    t = post(gather, step.root, 0.0)  # the root, waited for before forward
    done = {}
    if n and ahead:
        done[0] = post(gather, units[0], 0.0)
    for i in range(n):
        if i not in done:
            done[i] = post(gather, units[i], t)
        t = max(t, done[i])
        if ahead and i + 1 < n:
            done[i + 1] = post(gather, units[i + 1], t)
        t += fwd[i]
    forward_end = t
    # Backward. Resharded units were freed after forward and are gathered again; kept ones are there.
    done = {} if step.reshard else {i: 0.0 for i in range(n)}
    for j, u in enumerate(reversed(range(n))):
        if u not in done:
            done[u] = post(gather, units[u], t)
        t = max(t, done[u])
        after = u - 1  # the next unit backward reaches
        if ahead and after >= 0 and after not in done:
            done[after] = post(gather, units[after], t)
        t += bwd[u]
        reduced = post(scatter, units[u], t)
        if not step.overlap:
            t = reduced
    t = max(t, post(scatter, step.root, t), stream["free"])
    return stream["comm"], t - sum(fwd) - sum(bwd)
