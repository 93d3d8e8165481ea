"""What `ddpbench-project --json` wrote, read back as data, and its scaling-efficiency chart.

The report draws projections beside measurements, so it reads the projection file here, as it reads
a results file in results.py: by its fields, without importing the projection package (which imports
this one: reports is the lower layer, LAYERS says so and scripts/check-layers holds it).
"""
import json
import math
import os
from dataclasses import dataclass, field
from typing import List, Optional

from . import files, results

SCHEMA_VERSION = 1  # the "ddpbench_projection" key's value that projection/cli.py writes


@dataclass
class ProjectedCase:
    """One projected row of the file: what the report's table and chart read of it."""
    workload: str
    strategy: str
    status: str                    # "projected" or "refused"
    world: int
    nodes: int
    from_case: str
    step_ms: Optional[float] = None
    samples_per_second: Optional[float] = None
    scaling_efficiency: Optional[float] = None
    comm_ms: Optional[float] = None
    exposed_comm_ms: Optional[float] = None
    memory_per_device_bytes: Optional[float] = None
    algorithms: List[str] = field(default_factory=list)


def is_projection_file(path):
    """True for what `ddpbench-project --json` wrote (ddpbench-report takes those too)."""
    try:
        head = files.read_regular_file(path)[:4096]
    except OSError:
        return False  # not a file the report can read: results.load says why
    return b'"ddpbench_projection"' in head


def load(path):
    """(document, [ProjectedCase]) of a `--json` file, every field the report reads checked;
    anything else is a results.ResultsError naming the file and the field."""
    try:
        doc = json.loads(files.read_regular_file(path).decode("utf-8"), parse_constant=results._refuse_constant)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, results.ResultsError, RecursionError) as e:
        raise results.ResultsError(f"{path}: not a readable projection file: {str(e).splitlines()[0] if str(e) else e}")
    if not isinstance(doc, dict) or doc.get("ddpbench_projection") != SCHEMA_VERSION or not isinstance(
            doc.get("projections"), list):
        raise results.ResultsError(f"{path}: not a projection file of version {SCHEMA_VERSION}")
    out = []
    kinds = {"workload": str, "strategy": str, "status": str, "world": int, "nodes": int, "from_case": str}
    numbers = ("step_ms", "samples_per_second", "scaling_efficiency", "comm_ms", "exposed_comm_ms",
               "memory_per_device_bytes")
    for i, p in enumerate(doc["projections"]):
        if not isinstance(p, dict):
            raise results.ResultsError(f"{path}: projections[{i}] is not an object")
        for key, kind in kinds.items():
            if not isinstance(p.get(key), kind) or isinstance(p.get(key), bool):
                raise results.ResultsError(f"{path}: projections[{i}].{key} should be {kind.__name__}")
        for key in numbers:
            v = p.get(key)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
                                  or v < 0 or v > results.LARGEST):
                raise results.ResultsError(f"{path}: projections[{i}].{key} is {v!r}, not a usable number")
        out.append(ProjectedCase(**{k: p.get(k) for k in list(kinds) + list(numbers)},
                                 algorithms=[str(a) for a in p.get("algorithms") or [] if isinstance(a, str)]))
    texts = doc.get("assumptions_text")
    doc["assumptions_text"] = [t for t in texts if isinstance(t, str)] if isinstance(texts, list) else []
    return doc, out


def chart(projections, path):
    """The projected scaling efficiency against world size, one line per workload/strategy, as a PNG
    written whole or not at all. `projections`: anything with ProjectedCase's fields (ddpbench-project
    passes its own records)."""
    import matplotlib
    matplotlib.use("Agg")
    matplotlib.rcParams["text.parse_math"] = False
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    series = {}
    for p in projections:
        if p.status == "projected" and p.scaling_efficiency is not None:
            series.setdefault(f"{p.workload}/{p.strategy}", []).append((p.world, p.scaling_efficiency * 100))
    for label, points in series.items():
        points.sort()
        ax.plot([w for w, _ in points], [e for _, e in points], marker="o", label=label)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("world size (ranks)")
    ax.set_ylabel("scaling efficiency, % (projected)")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    if series:
        ax.legend(fontsize=8)
    ax.set_title("Projected scaling efficiency")
    fig.tight_layout()
    tmp = path + f".tmp{os.getpid()}.png"
    try:
        fig.savefig(tmp, dpi=110)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        if os.path.exists(tmp):
            os.unlink(tmp)
