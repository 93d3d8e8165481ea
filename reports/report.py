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

from . import levers, pipeline_timeline, projection_file, results, stats  # noqa: E402
from .cases import collect_cases, measured  # noqa: E402
from .charts import CHARTS, chart_micro  # noqa: E402


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
    lever_lines = levers.why_lines(cases)
    if lever_lines:
        parts.append("<h2>Memory levers against the plain run</h2><ul>" + "".join(f"<li>{e(v)}</li>" for v in lever_lines)
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
