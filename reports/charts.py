"""The report's charts, each a function of the cases (reports/cases.py) and the output folder that
writes one PNG there and returns its path, or None where it has nothing to draw."""
import os
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
# Case names and file names come from the JSON: a '$' in one must stay a dollar sign, not start
# matplotlib's math mode (which fails on anything that is not valid TeX).
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402

from . import levers, stats  # noqa: E402
from .cases import label as case_label, measured  # noqa: E402

PHASE_ORDER = ["data", "replicate", "scatter", "forward", "gather_loss", "backward", "recompute", "reduce", "comm_exposed",
               "reduce_scatter_exposed", "all_gather_exposed",
               "worker_wait", "pipeline_wait", "optimizer", "checkpoint", "residual"]


def _save(fig, out_dir, name):
    path = os.path.join(out_dir, name)
    try:
        fig.savefig(path, dpi=100, bbox_inches="tight")
    finally:
        plt.close(fig)
    return path


def _per_workload(data):
    """One panel per workload, side by side: the figure and (axes, workload, its cases) per panel."""
    workloads = list(OrderedDict.fromkeys(c.workload for c in data))
    most = max(sum(1 for c in data if c.workload == w) for w in workloads)
    width = max(4.5, 0.3 * most)  # room for each bar's label when several files fill a panel
    fig, axes = plt.subplots(1, len(workloads), figsize=(width * len(workloads), 3.8), squeeze=False)
    return fig, [(ax, w, [c for c in data if c.workload == w]) for ax, w in zip(axes[0], workloads)]


def chart_throughput(cases, out_dir):
    data = measured(cases)
    if not data:
        return None
    fig, panels = _per_workload(data)
    for ax, w, rows in panels:
        upright = len(rows) > 6  # many bars: one-line labels, turned upright
        sep = " " if upright else "\n"
        labels = [f"{c.strategy}{sep}world {c.world}" + (f"{sep}{c.tag}" if c.tag else "") for c in rows]
        meds = [stats.median(c.throughputs) for c in rows]
        lo = [m - min(c.throughputs) for m, c in zip(meds, rows)]
        hi = [max(c.throughputs) - m for m, c in zip(meds, rows)]
        ax.bar(range(len(rows)), meds, yerr=[lo, hi], capsize=4, color="#4c72b0")
        ax.set_xticks(range(len(rows)), labels, fontsize=8, rotation=90 if upright else 0)
        ax.set_title(w)
        ax.set_ylabel("samples/s (median, min..max)")
    fig.suptitle("Throughput per strategy")
    return _save(fig, out_dir, "throughput.png")


def chart_scaling(cases, out_dir):
    data = [c for c in measured(cases) if c.median and c.median["ddpbench"].get("scaling_efficiency") is not None]
    worlds = {c.world for c in data if c.strategy != "single"}
    if len(worlds) < 2:
        return None  # one world size: the efficiency column of the table says it all
    fig, ax = plt.subplots(figsize=(6, 4))
    for key in OrderedDict.fromkeys((c.workload, c.strategy) for c in data if c.strategy != "single"):
        pts = sorted((c.world, c.median["ddpbench"]["scaling_efficiency"]) for c in data
                     if (c.workload, c.strategy) == key)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{key[0]} / {key[1]}")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("world size")
    ax.set_ylabel("throughput(N) / (N x throughput(single))")
    ax.set_title("Scaling efficiency")
    ax.legend(fontsize=7)
    return _save(fig, out_dir, "scaling.png")


def chart_memory(cases, out_dir):
    data = [c for c in measured(cases) if c.median and c.median["ddpbench"].get("memory")]
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(data) + 2), 4))
    max_dev = max(len(c.median["ddpbench"]["memory"]) for c in data)
    width = 0.8 / max_dev
    for d in range(max_dev):
        vals = []
        for c in data:
            mem = c.median["ddpbench"]["memory"]
            v = mem[d]["peak_allocated_bytes"] if d < len(mem) else None
            vals.append((v or 0) / 2 ** 20)
        ax.bar([i + d * width for i in range(len(data))], vals, width, label=f"device {d}")
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(data))], [case_label(c) for c in data], rotation=30,
                  ha="right", fontsize=8)
    ax.set_ylabel("peak allocated (MiB)")
    ax.set_title("Memory per device (device 0 first)")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "memory.png")


MEMORY_KINDS = [("parameter_bytes", "parameters", "#4c72b0"), ("gradient_bytes", "gradients", "#dd8452"),
                ("optimizer_state_bytes", "optimizer state", "#55a868"),
                ("other_bytes", "other (activations, buffers)", "#c7c7c7")]


def chart_memory_by_kind(cases, out_dir):
    """Device 0's peak split into what the strategy holds between steps, by kind, and the rest."""
    def split(c):
        mem = c.median["ddpbench"].get("memory") or []
        parts = [mem[0].get(key) for key, _, _ in MEMORY_KINDS] if mem else [None]
        return None if any(p is None for p in parts) else parts
    data = [(c, split(c)) for c in measured(cases) if c.median]
    data = [(c, parts) for c, parts in data if parts]
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(data) + 2), 4))
    bottom = [0.0] * len(data)
    for k, (_, label, color) in enumerate(MEMORY_KINDS):
        vals = [max(parts[k], 0) / 2 ** 20 for _, parts in data]
        ax.bar(range(len(data)), vals, 0.6, bottom=bottom, label=label, color=color)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.set_xticks(range(len(data)), [case_label(c) for c, _ in data], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("device 0 peak (MiB)")
    ax.set_title("Memory on device 0 by kind (held between steps; the rest of the peak on top)")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "memory_by_kind.png")


def memory_throughput_points(cases):
    """(case, peak MiB on its fullest device, median samples/s) for every measured case whose memory is
    known: what a strategy costs in memory per device against what it delivers."""
    points = []
    for c in measured(cases):
        mem = (c.median or {}).get("ddpbench", {}).get("memory") or []
        peaks = [m.get("peak_allocated_bytes") for m in mem if m.get("peak_allocated_bytes") is not None]
        if peaks:
            points.append((c, max(peaks) / 2 ** 20, stats.median(c.throughputs)))
    return points


def shared_labels(points):
    """[((x, y), "a, b")] from [(label, x, y)]: points within 1% of the panel's span of each other
    share one label, since labels written one over the other (ddp and zero1 at one world, often)
    could not be read."""
    x_span = max((x for _, x, _ in points), default=0) or 1.0
    y_span = max((y for _, _, y in points), default=0) or 1.0
    groups = OrderedDict()
    for label, x, y in points:
        groups.setdefault((round(100 * x / x_span), round(100 * y / y_span)), ((x, y), []))[1].append(label)
    return [(at, ", ".join(labels)) for at, labels in groups.values()]


def chart_memory_vs_throughput(cases, out_dir):
    """One point per strategy and world size, a panel per workload: up and to the left is better."""
    points = memory_throughput_points(cases)
    if not points:
        return None
    fig, panels = _per_workload([c for c, _, _ in points])
    at = {id(c): (mib, tput) for c, mib, tput in points}
    for ax, w, rows in panels:
        for c in rows:
            ax.scatter([at[id(c)][0]], [at[id(c)][1]], color="#4c72b0")
        named = [(f"{c.strategy} {c.mesh or c.world}" + (f" [{c.tag}]" if c.tag else ""), *at[id(c)]) for c in rows]
        for (mib, tput), text in shared_labels(named):
            ax.annotate(text, (mib, tput), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_title(w)
        ax.set_xlabel("peak per device (MiB, fullest device)")
        ax.set_ylabel("samples/s (median)")
        ax.set_xlim(0, 1.35 * max(at[id(c)][0] for c in rows))  # room for the labels on the right
        ax.set_ylim(0, 1.1 * max(at[id(c)][1] for c in rows))
    fig.suptitle("Memory per device against throughput (strategy, world size or mesh)")
    return _save(fig, out_dir, "memory_vs_throughput.png")


def chart_phases(cases, out_dir):
    data = [c for c in measured(cases) if c.median and c.median["ddpbench"].get("phases_ms")]
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(8, 0.45 * len(data) + 1.5))
    left = [0.0] * len(data)
    # Shares of each case's own step: cases differ in step time by orders of magnitude.
    totals = [sum(max(0.0, v) for v in c.median["ddpbench"]["phases_ms"].values()) or 1.0 for c in data]
    for phase in PHASE_ORDER:
        vals = [100 * max(0.0, c.median["ddpbench"]["phases_ms"].get(phase, 0.0)) / t for c, t in zip(data, totals)]
        if not any(vals):
            continue
        ax.barh(range(len(data)), vals, left=left, label=phase)
        left = [l + v for l, v in zip(left, vals)]
    ax.set_yticks(range(len(data)), [case_label(c) for c in data], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("% of the step (median phase times)")
    ax.set_title("Where a step's time goes")
    ax.legend(fontsize=7, ncol=5, loc="upper center", bbox_to_anchor=(0.5, -0.15))
    return _save(fig, out_dir, "phases.png")


def chart_loss(cases, out_dir):
    """Training loss against samples seen, per workload: where an asynchronous strategy ran, its
    price shows against single's curve over the same samples (repetition 0 of each case)."""
    data = [c for c in measured(cases) if c.iterations[0]["ddpbench"].get("loss_curve")]
    if not any(c.fields.get("loss_vs_single") or c.iterations[0]["ddpbench"].get("async") for c in data):
        return None  # without an asynchronous case every curve matches single's: parity says it
    fig, panels = _per_workload(data)
    for ax, w, rows in panels:
        for c in rows:
            curve = c.iterations[0]["ddpbench"]["loss_curve"]
            pts = [(s, l) for s, l in zip(curve["samples_seen"], curve["loss"]) if l is not None]
            tag = f" [{c.tag}]" if c.tag else ""
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=f"{c.strategy} world {c.world}{tag}")
        ax.set_title(w)
        ax.set_xlabel("samples seen")
        ax.set_ylabel("training loss")
        ax.legend(fontsize=7)
    fig.suptitle("Loss against samples seen")
    return _save(fig, out_dir, "loss.png")


def chart_step_times(cases, out_dir):
    data = [c for c in measured(cases) if c.step_times]
    if not data:
        return None
    fig, ax = plt.subplots(figsize=(max(6, 0.8 * len(data) + 2), 4))
    ax.boxplot([c.step_times for c in data])
    ax.set_xticks(range(1, len(data) + 1), [case_label(c) for c in data], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step-time distributions (every measured step)")
    return _save(fig, out_dir, "step_times.png")


def chart_levers(cases, out_dir):
    """Peak memory per device against throughput, a panel per workload, a line per strategy and world
    through its settings (sorted by peak), each point labelled with its setting."""
    found = levers.groups(cases)
    if not found:
        return None
    firsts = [next(iter(v.values())) for v in found.values()]
    fig, panels = _per_workload(firsts)
    for ax, w, _ in panels:
        right = top = 0.0
        for (workload, strategy, world), settings in found.items():
            if workload != w:
                continue
            pts = []
            for setting, c in settings.items():
                peak, _ = levers.figures(c)
                if peak is not None:
                    pts.append((peak / 2 ** 20, stats.median(c.throughputs), levers.short_text(setting)))
            pts.sort()
            if not pts:
                continue
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"{strategy} world {world}")
            for (x, y), text in shared_labels([(text, x, y) for x, y, text in pts]):
                ax.annotate(text, (x, y), textcoords="offset points", xytext=(4, 3), fontsize=7)
            right, top = max(right, max(p[0] for p in pts)), max(top, max(p[1] for p in pts))
        ax.set_title(w)
        ax.set_xlabel("peak per device (MiB, fullest device)")
        ax.set_ylabel("samples/s (median)")
        ax.set_xlim(0, 1.35 * right or 1)
        ax.set_ylim(0, 1.1 * top or 1)
        ax.legend(fontsize=7)
    fig.suptitle("Memory levers: peak per device against throughput (a point per setting)")
    return _save(fig, out_dir, "levers.png")


CHARTS = [("Throughput", chart_throughput), ("Scaling efficiency", chart_scaling), ("Memory per device", chart_memory),
          ("Memory by kind", chart_memory_by_kind),
          ("Memory per device against throughput", chart_memory_vs_throughput),
          ("Memory levers: peak per device against throughput", chart_levers),
          ("Phase breakdown", chart_phases), ("Loss against samples seen", chart_loss),
          ("Step-time distributions", chart_step_times)]


def _micro_family(name):
    return name.split("/")[0]


def chart_micro(micro_docs, out_dir):
    """Bandwidth against message size per ddpbench-micro family (median over repetitions)."""
    series = OrderedDict()
    for _, doc in micro_docs:
        for b in doc["benchmarks"]:
            if b["run_type"] != "iteration" or "bytes" not in b:
                continue
            rate = b.get("busbw", b.get("bytes_per_second"))
            if rate is None:
                continue
            series.setdefault(_micro_family(b["name"]), OrderedDict()).setdefault(b["bytes"], []).append(rate)
    series = OrderedDict((k, v) for k, v in series.items() if len(v) > 1)  # sweeps only
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for family, points in series.items():
        sizes = sorted(points)
        ax.plot(sizes, [stats.median(points[s]) / 1e9 for s in sizes], marker="o", label=family)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("GB/s (busbw for all-reduce, else bytes/s)")
    ax.set_title("Micro-benchmarks: the ceilings of communication")
    ax.legend(fontsize=8)
    return _save(fig, out_dir, "micro.png")
