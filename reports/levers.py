"""The memory levers side by side: cases of several results files that differ only by their levers
(--activation-checkpointing, --grad-accum and its sync flags, as each file's
settings.strategy_settings.levers says), drawn as peak memory per device against throughput (a line
per workload, strategy and world, a point per setting) and said in "why" lines against the same
case without levers: what each lever cut (activations, the peak) and what it cost in throughput, or
"cannot tell" where the repetitions cannot tell the throughputs apart."""
from collections import OrderedDict

from . import stats
from .cases import measured

PLAIN = ("none", 1, False, False)


def levers_of(context):
    """(activation_checkpointing, grad_accum, sync_every_microbatch, no_sync_accum) a results file ran
    with, from its context; a file written before the levers existed ran without them."""
    lv = context.get("ddpbench", {}).get("settings", {}).get("strategy_settings", {}).get("levers") or {}
    return (lv.get("activation_checkpointing", "none"), int(lv.get("grad_accum", 1)),
            bool(lv.get("sync_every_microbatch", False)), bool(lv.get("no_sync_accum", False)))


def sweep_of(c):
    """The sweep (ddpbench-levers) a case's file came from, or None: cases of one sweep ran in the same
    interleaved rounds, so their repetitions pair up."""
    return c.context.get("ddpbench_levers", {}).get("sweep")


def setting_text(levers):
    """A setting in the flags' words: "full checkpointing", "grad-accum 4 (no_sync_accum)", "no levers"."""
    policy, k, every, held = levers
    parts = []
    if policy != "none":
        parts.append("full checkpointing" if policy == "full" else f"checkpointing {policy}")
    if k > 1:
        parts.append(f"grad-accum {k}" + (" synced every micro-batch" if every else "")
                     + (" holding unsharded gradients" if held else ""))
    return " + ".join(parts) or "no levers"


def _group_key(c):
    return c.workload, c.strategy, c.mesh or str(c.world)


def figures(c):
    """(peak bytes on the fullest device, activation bytes on the device with most or None)."""
    memory = ((c.median or {}).get("ddpbench") or c.fields).get("memory") or []
    peaks = [m["peak_allocated_bytes"] for m in memory if m.get("peak_allocated_bytes") is not None]
    acts = [m["activation_bytes"] for m in memory if m.get("activation_bytes") is not None]
    return (max(peaks) if peaks else None), (max(acts) if acts else None)


def groups(cases):
    """{(workload, strategy, world or mesh): {levers: case}} for every measured case whose group ran
    under at least two settings: the cases a lever comparison can be drawn from."""
    by = OrderedDict()
    for c in measured(cases):
        by.setdefault(_group_key(c), OrderedDict()).setdefault(levers_of(c.context), c)
    return OrderedDict((k, v) for k, v in by.items() if len(v) >= 2)


def _mib(b):
    return f"{b / 2 ** 20:.1f}"


def _cut(before, after, what):
    """'activations 812.0 -> 133.0 MiB (6.1x fewer)', or None where either is unknown."""
    if before is None or after is None:
        return None
    if after == before:
        return f"{what} unchanged ({_mib(after)} MiB)"
    if after < before:
        way = f"{before / after:.1f}x less" if after > 0 else "all gone"
    else:
        way = f"{after / before:.2f}x more" if before > 0 else "from none"
    return f"{what} {_mib(before)} -> {_mib(after)} MiB ({way})"


def throughput_text(base, other, paired):
    """The lever's throughput against the plain case's: the ratio with its 95% interval where it
    tells them apart, else "cannot tell" with why."""
    b, o = base.throughputs, other.throughputs
    point = stats.median(o) / stats.median(b)
    interval = stats.paired_ratio_interval(b, o) if paired else stats.ratio_interval(b, o)
    if interval is None:
        return f"throughput {point:.2f}x, cannot tell (one repetition a side: no spread to judge by)"
    lo, hi = interval
    if lo <= 1.0 <= hi:
        return f"throughput cannot tell ({lo:.2f}-{hi:.2f}x at 95%, which holds 1.0x)"
    return f"at {point:.2f}x throughput ({lo:.2f}-{hi:.2f}x at 95%)"


def why_lines(cases):
    """One line per lever setting of every group that ran without levers too, in the user's terms:
    "gpt2/fsdp world 4: full checkpointing: activations 812.0 -> 133.0 MiB (6.1x less), peak
    1950.0 -> 1210.0 MiB (1.6x less), at 0.78x throughput (0.74-0.82x at 95%)"."""
    lines = []
    for (workload, strategy, world), settings in groups(cases).items():
        base = settings.get(PLAIN)
        if base is None:
            lines.append(f"{workload}/{strategy} world {world}: ran only with levers, no plain run to compare with")
            continue
        base_peak, base_act = figures(base)
        for levers, c in settings.items():
            if levers == PLAIN:
                continue
            peak, act = figures(c)
            said = [s for s in (_cut(base_act, act, "activations"), _cut(base_peak, peak, "peak")) if s]
            paired = sweep_of(base) is not None and sweep_of(base) == sweep_of(c) and len(base.throughputs) == len(c.throughputs)
            said.append(throughput_text(base, c, paired))
            lines.append(f"{workload}/{strategy} world {world}: {setting_text(levers)}: " + ", ".join(said))
    return lines


def short_text(levers):
    """A point's label on the chart: "plain", "AC full", "K=4", "AC every:2, K=4 sync"."""
    policy, k, every, held = levers
    parts = [] if policy == "none" else [f"AC {policy}"]
    if k > 1:
        parts.append(f"K={k}" + (" sync" if every else "") + (" held" if held else ""))
    return ", ".join(parts) or "plain"
