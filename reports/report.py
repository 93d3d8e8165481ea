"""Turn one or more ddpbench results files into PNG charts and one self-contained HTML page.

    ddpbench-report RESULTS.json [MORE.json ...] -o DIR [--trace TRACE_DIR]

Writes DIR/<chart>.png and DIR/index.html, which embeds every chart as a base64 PNG and makes no
outside request. Every string taken from the JSON is HTML-escaped. The report is written whole or
not at all: on any failure DIR is left as it was.
"""
import argparse
import base64
import html
import os
import re
import shutil
import sys
import tempfile
from collections import OrderedDict

import matplotlib

matplotlib.use("Agg")
# Case names and file names come from the JSON: a '$' in one must stay a dollar sign, not start
# matplotlib's math mode (which fails on anything that is not valid TeX).
matplotlib.rcParams["text.parse_math"] = False
import matplotlib.pyplot as plt  # noqa: E402

from . import pipeline_timeline, projection_file, results, stats  # noqa: E402

PHASE_ORDER = ["data", "replicate", "scatter", "forward", "gather_loss", "backward", "reduce", "comm_exposed",
               "reduce_scatter_exposed", "all_gather_exposed",
               "worker_wait", "pipeline_wait", "optimizer", "checkpoint", "residual"]


class Case:
    """One measured or skipped case of one results file."""

    def __init__(self, name, source):
        self.name = name
        self.source = source
        self.tag = ""  # what tells its file from the others' in a report of several (source_tags)
        self.iterations = []
        self.median = None
        self.fields = None

    @property
    def workload(self):
        return self.fields["workload"]

    @property
    def strategy(self):
        return self.fields["strategy"]

    @property
    def world(self):
        return int(self.fields["world_size"])

    @property
    def status(self):
        return self.fields["status"]

    @property
    def throughputs(self):
        return [b["items_per_second"] for b in self.iterations if "items_per_second" in b]

    @property
    def step_times(self):
        return [t for b in self.iterations for t in b["ddpbench"].get("step_times_ms", [])]


def source_tags(sources):
    """A short tag per file name, for labels in a report of several files: the part of each name
    that the others do not share (all-workloads-h100-fp32.json, ...-bf16.json: fp32, bf16); the
    whole name where that part is empty; nothing for a single file."""
    names = list(OrderedDict.fromkeys(sources))
    if len(names) < 2:
        return {n: "" for n in names}
    prefix = os.path.commonprefix(names)
    suffix = os.path.commonprefix([n[::-1] for n in names])[::-1]
    tags = {}
    for n in names:
        core = n[len(prefix):len(n) - len(suffix)] if len(prefix) + len(suffix) < len(n) else ""
        tags[n] = core.strip("-_.") or n
    return tags


def _label(c):
    return f"{c.name} [{c.tag}]" if c.tag else c.name


def collect_cases(docs):
    cases = OrderedDict()
    for source, doc in docs:
        for b in doc["benchmarks"]:
            name = b.get("run_name", b["name"])
            key = (source, name)
            case = cases.setdefault(key, Case(name, source))
            if case.fields is None:
                case.fields = b["ddpbench"]
            if b["run_type"] == "iteration" and not b.get("error_occurred"):
                case.iterations.append(b)
            elif b.get("aggregate_name") == "median":
                case.median = b
    tags = source_tags([source for source, _ in docs])
    for case in cases.values():
        case.tag = tags[case.source]
    return list(cases.values())


def measured(cases):
    """Cases whose numbers stand: ok, with repetitions. A failed case's kept repetitions are not ranked."""
    return [c for c in cases if c.iterations and c.status == "ok"]


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
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(data))], [_label(c) for c in data], rotation=30,
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
    ax.set_xticks(range(len(data)), [_label(c) for c, _ in data], rotation=30, ha="right", fontsize=8)
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
        named = [(f"{c.strategy} {c.world}" + (f" [{c.tag}]" if c.tag else ""), *at[id(c)]) for c in rows]
        for (mib, tput), text in shared_labels(named):
            ax.annotate(text, (mib, tput), textcoords="offset points", xytext=(4, 3), fontsize=7)
        ax.set_title(w)
        ax.set_xlabel("peak per device (MiB, fullest device)")
        ax.set_ylabel("samples/s (median)")
        ax.set_xlim(0, 1.35 * max(at[id(c)][0] for c in rows))  # room for the labels on the right
        ax.set_ylim(0, 1.1 * max(at[id(c)][1] for c in rows))
    fig.suptitle("Memory per device against throughput (strategy, world size)")
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
    ax.set_yticks(range(len(data)), [_label(c) for c in data], fontsize=8)
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
    ax.set_xticks(range(1, len(data) + 1), [_label(c) for c in data], rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("step time (ms)")
    ax.set_title("Step-time distributions (every measured step)")
    return _save(fig, out_dir, "step_times.png")


CHARTS = [("Throughput", chart_throughput), ("Scaling efficiency", chart_scaling), ("Memory per device", chart_memory),
          ("Memory by kind", chart_memory_by_kind),
          ("Memory per device against throughput", chart_memory_vs_throughput),
          ("Phase breakdown", chart_phases), ("Loss against samples seen", chart_loss),
          ("Step-time distributions", chart_step_times)]


def verdicts(cases):
    """One line per workload: the fastest strategy and how the others compare."""
    lines = []
    data = measured(cases)
    for w in OrderedDict.fromkeys(c.workload for c in data):
        rows = sorted((c for c in data if c.workload == w), key=lambda c: -stats.median(c.throughputs))
        best = rows[0]
        line = f"{w}: fastest is {best.strategy} (world {best.world}, {stats.median(best.throughputs):.0f} samples/s)"
        others = [f"{c.strategy} world {c.world} at {stats.median(c.throughputs) / stats.median(best.throughputs):.2f}x"
                  for c in rows[1:]]
        if others:
            line += "; " + ", ".join(others)
        lines.append(line)
    return lines


def _table(header, rows):
    e = html.escape
    out = ["<table><tr>" + "".join(f"<th>{e(str(h))}</th>" for h in header) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(f"<td>{e(str(v))}</td>" for v in r) + "</tr>")
    out.append("</table>")
    return "\n".join(out)


def precision_text(fields):
    """'+-2.1%', or '+-4.8% unresolved' where adaptive sampling ran out of time first; '-' without."""
    precision = fields.get("precision") or {}
    achieved = precision.get("achieved_ci95")
    if achieved is None:
        return "-"
    return f"+-{achieved * 100:.1f}%" + (" unresolved" if precision.get("unresolved") else "")


def step_time_text(case):
    """The median repetition's step time and its interval: '12.3 ms +-2.1%'; '-' where nothing was
    measured, the interval alone where the file has no time (a hand-made one)."""
    med = case.median or {}
    ms = med.get("real_time")
    if ms is None or not case.throughputs:
        return "-" if not case.throughputs else precision_text(case.fields)
    ms *= results.TO_MS[med.get("time_unit", "ms")]
    interval = precision_text(case.fields)
    return f"{ms:.3g} ms" + ("" if interval == "-" else f" {interval}")


def interruption_text(docs):
    """One line per file that an interrupted or stopped run left, for the top of the report."""
    lines = []
    for source, doc in docs:
        if not results.is_complete(doc):
            why = doc["context"]["ddpbench"].get("interruption") or "stopped before its end"
            lines.append(f"{source}: an interrupted run ({why}): cases it did not reach are not_run, and "
                         f"what it measured is all there is")
    return lines


def render_html(docs, cases, charts):
    e = html.escape
    parts = ["<!DOCTYPE html><html><head><meta charset='utf-8'><title>ddpbench report</title>",
             "<style>body{font-family:sans-serif;margin:2em;max-width:1200px}table{border-collapse:collapse;"
             "margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;font-size:13px}th{background:#eee}"
             "img{max-width:100%;border:1px solid #ddd;margin:0.5em 0}</style></head><body>",
             "<h1>ddpbench report</h1>"]
    parts += [f"<p><strong>{e(line)}</strong></p>" for line in interruption_text(docs)]
    # ddpbench's own explanation (top-level "ddpbench.why") where the file has one, else a verdict
    # computed here from throughput alone.
    why = [line for _, doc in docs for w in doc.get("ddpbench", {}).get("why", []) for line in w.get("lines", [])]
    parts.append("<h2>Verdict per workload</h2><ul>" + "".join(f"<li>{e(v)}</li>" for v in (why or verdicts(cases)))
                 + "</ul>")
    rows = []
    for c in cases:
        med = c.median["ddpbench"] if c.median else {}
        rows.append([c.source, c.name, c.status, step_time_text(c),
                     f"{stats.median(c.throughputs):.1f}" if c.throughputs else "-",
                     results.tflops_text(med),
                     f"{med['scaling_efficiency']:.2f}" if med.get("scaling_efficiency") is not None else "-",
                     f"{med['memory_imbalance']:.2f}" if med.get("memory_imbalance") is not None else "-",
                     c.fields.get("reason") or c.fields.get("note") or ""])
    parts.append("<h2>Cases</h2>" + _table(["file", "case", "status", "step time +-95%", "samples/s", "TFLOP/s",
                                           "scaling", "imbalance", "note"], rows))
    for title, path in charts:
        with open(path, "rb") as f:
            data = base64.b64encode(f.read()).decode("ascii")
        parts.append(f"<h2>{e(title)}</h2><img alt='{e(title)}' src='data:image/png;base64,{data}'>")
    parity_rows = []
    for c in cases:
        p = c.fields.get("parity")
        if p:
            parity_rows.append([c.name, p["steps"], f"{p['max_rel_param_diff']:.2e}", p["tolerance"],
                                "cannot tell" if p.get("checked") is False else "ok" if p["within_tolerance"] else "DIFF",
                                p.get("note", "")])
    parts.append("<h2>Parity with single</h2>" +
                 _table(["case", "steps", "max rel. param diff", "tolerance", "result", "note"], parity_rows))
    for source, doc in docs:
        ctx = doc["context"]
        d = ctx["ddpbench"]
        rows = [["host", ctx.get("host_name")], ["date", ctx.get("date")], ["cpus", ctx.get("num_cpus")],
                ["ddpbench", f"{d.get('version')} ({d.get('git_sha')})"], ["LibTorch", d.get("torch_version")],
                ["CUDA", d.get("cuda_version")], ["NCCL", d.get("nccl_version")], ["dtype", results.dtype(doc)],
                ["argv", " ".join(d.get("argv", []))]]
        rows += [[f"device {dev['index']} ({dev['kind']})", f"{dev['name']}, {dev['total_memory_bytes'] / 2**30:.1f} GiB"]
                 for dev in d.get("devices", [])]
        rows += [[k, v] for k, v in d.get("env", {}).items()]
        parts.append(f"<h2>Context: {e(source)}</h2>" + _table(["", ""], rows))
    parts.append("</body></html>")
    return "\n".join(parts)


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


def render_micro_tables(micro_docs):
    e = html.escape
    parts = []
    for source, doc in micro_docs:
        rows = []
        for b in doc["benchmarks"]:
            if b["run_type"] == "iteration":
                rate = b.get("busbw", b.get("bytes_per_second"))
                rows.append([b["name"], b.get("bytes", "-"), f"{b['real_time']:.0f} {b.get('time_unit', '')}",
                             f"{rate / 1e9:.3f}" if rate else "-"])
        parts.append(f"<h2>Micro-benchmarks: {e(source)}</h2>" +
                     _table(["benchmark", "bytes", "time", "GB/s"], rows))
    return "\n".join(parts)


def render_projection_tables(projections):
    e = html.escape
    parts = []
    for source, doc, items in projections:
        rows = []
        for p in items:
            if p.status != "projected":
                rows.append([f"{p.workload}/{p.strategy}", p.world, p.nodes, "refused", "", "", ""])
                continue
            rows.append([f"{p.workload}/{p.strategy}", p.world, p.nodes, f"{p.step_ms:.3f}",
                         f"{p.samples_per_second:.4g}",
                         "-" if p.scaling_efficiency is None else f"{p.scaling_efficiency * 100:.1f}%",
                         "-" if p.exposed_comm_ms is None else f"{p.exposed_comm_ms:.3f}"])
        parts.append(f"<h2>Projection: {e(source)} (predicted, not measured)</h2>" +
                     _table(["case", "world", "nodes", "step ms", "samples/s", "efficiency", "exposed comm ms"], rows) +
                     "<ul>" + "".join(f"<li>{e(t)}</li>" for t in doc["assumptions_text"]) + "</ul>")
    return "\n".join(parts)


# The files a report writes: the charts' PNGs and the page. An earlier report's files of these names
# that this one does not write (a chart with nothing to draw this time) are removed with it.
REPORT_FILE = re.compile(r"index\.html|(throughput|scaling|memory|memory_by_kind|memory_vs_throughput|phases|loss|"
                         r"step_times|micro|projection\d*|pipeline_timeline\d*)\.png")


def _is_report_file(name):
    return REPORT_FILE.fullmatch(name) is not None


def _draw(paths, staging, trace_dir=None):
    """Draws the whole report into `staging`; returns the page's name and the charts' names there."""
    projections = [(os.path.basename(p),) + projection_file.load(p) for p in paths
                   if projection_file.is_projection_file(p)]
    loaded = [(os.path.basename(p), results.load(p)) for p in paths if not projection_file.is_projection_file(p)]
    docs = [(s, d) for s, d in loaded if not results.is_micro(d)]
    micro_docs = [(s, d) for s, d in loaded if results.is_micro(d)]
    cases = collect_cases(docs)
    charts = []
    for title, fn in CHARTS:
        path = fn(cases, staging)
        if path:
            charts.append((title, path))
    if trace_dir is not None:
        charts += pipeline_timeline.charts(cases, pipeline_timeline.load_traces(trace_dir), staging)
    micro_chart = chart_micro(micro_docs, staging)
    if micro_chart:
        charts.append(("Micro-benchmarks", micro_chart))
    for i, (source, _, items) in enumerate(projections):
        path = os.path.join(staging, f"projection{i if i else ''}.png")
        projection_file.chart(items, path)
        charts.append((f"Projected scaling efficiency: {source}", path))
    page = render_html(docs, cases, charts)
    if projections:
        page = page.replace("</body></html>", render_projection_tables(projections) + "\n</body></html>")
    if micro_docs:
        page = page.replace("</body></html>", render_micro_tables(micro_docs) + "\n</body></html>")
    with open(os.path.join(staging, "index.html"), "w", encoding="utf-8") as f:
        f.write(page)
    return "index.html", [os.path.basename(p) for _, p in charts]


def write_report(paths, out_dir, trace_dir=None):
    """Writes the report whole or not at all: it is drawn into a temporary directory beside or inside
    `out_dir` (the same file system), and only once every file is written are they renamed into place.
    A failure (a full disk, a file-size limit, a bad input) leaves `out_dir` as it was: an earlier
    report there survives, and no temporary file is left."""
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise results.ResultsError(f"-o {out_dir}: is a file, not a directory")
    existed = os.path.isdir(out_dir)
    if existed:
        staging = tempfile.mkdtemp(prefix=".ddpbench-report-", dir=out_dir)
    else:
        parent = os.path.dirname(os.path.abspath(out_dir))
        os.makedirs(parent, exist_ok=True)
        staging = tempfile.mkdtemp(prefix=f".{os.path.basename(os.path.abspath(out_dir))}.tmp-", dir=parent)
    try:
        index, charts = _draw(paths, staging, trace_dir)
        if existed:
            # Renames within one directory need no space: once here, the new report is complete.
            written = set(charts) | {index}
            for name in charts + [index]:
                os.replace(os.path.join(staging, name), os.path.join(out_dir, name))
            os.rmdir(staging)
            for name in os.listdir(out_dir):
                if _is_report_file(name) and name not in written:
                    os.unlink(os.path.join(out_dir, name))
        else:
            os.chmod(staging, 0o777 & ~_umask())  # mkdtemp's 0700 is for the staging only
            os.rename(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return os.path.join(out_dir, index), [os.path.join(out_dir, c) for c in charts]


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def main(argv=None):
    p = argparse.ArgumentParser(prog="ddpbench-report", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", nargs="+", help="ddpbench results JSON files, ddpbench-micro files and ddpbench-project --json files")
    p.add_argument("-o", "--output", required=True, help="directory for the PNGs and index.html")
    p.add_argument("--trace", metavar="DIR", help="the trace files of the run (ddpbench --trace DIR): each pp case's "
                   "pipeline timeline, one row a rank")
    args = p.parse_args(argv)
    try:
        index, charts = write_report(args.results, args.output, args.trace)
    except results.ResultsError as e:
        print(f"ddpbench-report: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # the output directory: not creatable, not writable, full
        print(f"ddpbench-report: -o {args.output}: {e.strerror or e}", file=sys.stderr)
        return 2
    print(f"ddpbench-report: {len(charts)} chart(s) and {index}")
    return 0
