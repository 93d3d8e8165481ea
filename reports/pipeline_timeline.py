"""The picture people draw of a pipeline: for each `pp` case, one row a rank, a box for each
micro-batch's forward and backward, the waits on neighbours shaded, the gaps between them idle. Drawn
from the per-rank Chrome trace files that `ddpbench --trace DIR` writes (ddpbench-rank<N>.json),
one step: the last measured step of the case's first repetition that every rank's trace holds.
Trace timestamps are wall-clock microseconds, aligned across ranks (timing/trace.cpp), so the rows
share one time axis from the step's earliest start."""
import glob
import json
import os

import matplotlib.pyplot as plt

from .results import ResultsError

COLOURS = {"forward": "#4c72b0", "backward": "#dd8452", "pipeline_wait": "#e6e6e6"}


def load_traces(directory):
    """{case name: {rank: [span events]}} from the ddpbench-rank*.json files of `directory`;
    ResultsError naming --trace where it holds none or one cannot be read."""
    paths = sorted(glob.glob(os.path.join(directory, "ddpbench-rank*.json")))
    if not paths:
        raise ResultsError(f"--trace {directory}: no ddpbench-rank*.json trace files there")
    out = {}
    for path in paths:
        try:
            with open(path, encoding="utf-8") as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise ResultsError(f"--trace {path}: cannot be read as a trace: {e}") from None
        events = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
        if not isinstance(events, list):
            raise ResultsError(f"--trace {path}: no list of trace events")
        for e in events:
            if not isinstance(e, dict) or e.get("ph") != "X" or not isinstance(e.get("args"), dict):
                continue
            case, rank = e["args"].get("case"), e.get("pid")
            if isinstance(case, str) and isinstance(rank, int) and all(isinstance(e.get(k), (int, float)) for k in ("ts", "dur")):
                out.setdefault(case, {}).setdefault(rank, []).append(e)
    return out


def one_step(by_rank):
    """{rank: [(name, start ms, duration ms)]} of the last step of repetition 0 that every rank
    traced, from that step's earliest start; None where the ranks share no step."""
    def steps_of(events):
        return {e["args"].get("step") for e in events if e["name"] == "step" and e["args"].get("repetition", 0) == 0}
    common = set.intersection(*(steps_of(events) for events in by_rank.values())) - {None}
    if not common:
        return None
    step = max(common)
    chosen = {rank: [e for e in events if e["args"].get("step") == step and e["args"].get("repetition", 0) == 0]
              for rank, events in by_rank.items()}
    origin = min(e["ts"] for events in chosen.values() for e in events if e["name"] == "step")
    return {rank: sorted(((e["name"], (e["ts"] - origin) / 1e3, e["dur"] / 1e3) for e in events if e["name"] != "step"),
                         key=lambda x: x[1])
            for rank, events in chosen.items()}


def chart(case, timeline, path):
    """One case's timeline as a PNG at `path`. Forward and backward boxes carry their micro-batch's
    number where each rank runs them in micro-batch order (GPipe, 1F1B)."""
    pipeline = case.fields.get("pipeline") or {}
    numbered = pipeline.get("schedule") in ("gpipe", "1f1b")
    ranks = sorted(timeline)
    fig, ax = plt.subplots(figsize=(11, 0.6 * len(ranks) + 1.6))
    end = 0.0
    for row, rank in enumerate(ranks):
        count = {"forward": 0, "backward": 0}
        for name, start, duration in timeline[rank]:
            if name not in COLOURS:
                continue
            ax.broken_barh([(start, duration)], (row - 0.4, 0.8), facecolors=COLOURS[name],
                           edgecolor="white" if name != "pipeline_wait" else "none", linewidth=0.5)
            end = max(end, start + duration)
            if name in count:
                if numbered and duration > 0:
                    ax.text(start + duration / 2, row, str(count[name]), ha="center", va="center", fontsize=7, color="white")
                count[name] += 1
    ax.set_yticks(range(len(ranks)))
    ax.set_yticklabels([f"rank {r}" for r in ranks])
    ax.invert_yaxis()
    ax.set_xlim(0, end * 1.01 if end > 0 else 1)
    ax.set_xlabel("ms from the step's start")
    expected = pipeline.get("expected_bubble")
    measured = pipeline.get("bubble")
    title = f"{case.name}: {pipeline.get('schedule', '?')}, {pipeline.get('stages', '?')} stages, " \
            f"{pipeline.get('microbatches', '?')} micro-batches"
    if isinstance(measured, (int, float)) and isinstance(expected, (int, float)):
        title += f"; waiting {measured:.0%} (formula {expected:.0%})"
    ax.set_title(title, fontsize=10)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLOURS.values()]
    ax.legend(handles, ["forward", "backward", "waiting on a neighbour"], loc="upper right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def charts(cases, traces, out_dir):
    """[(title, path)] of every pp case whose ranks' traces are in `traces` (load_traces)."""
    out = []
    for case in cases:
        if not case.fields.get("pipeline") or case.name not in traces:
            continue
        timeline = one_step(traces[case.name])
        if timeline is None:
            continue
        path = os.path.join(out_dir, f"pipeline_timeline{len(out) if out else ''}.png")
        chart(case, timeline, path)
        out.append((f"Pipeline timeline: {case.name}", path))
    return out
