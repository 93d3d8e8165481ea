"""Compare two ddpbench results files case by case: the CI regression gate.

Per case (present and measured on both sides) it takes the per-repetition mean step times, reports
the change in median, a two-sided Mann-Whitney U test, and the measured noise (the larger CV of the
two sides), and gives a verdict:

  same    not significant (p >= alpha) or smaller than --min-effect
  faster  significant, beyond --min-effect and beyond the noise, and faster
  slower  the same, slower: a regression
  noisy   the runs' own spread is too large to tell (noise >= min effect with no clear change, or a
          significant change smaller than the noise, the larger CV of the two sides)
  failed  measured in the baseline but failed (or out of memory) now: a regression

Exit codes: 0 nothing regressed, 1 a case is slower or newly failed, 2 unreadable or incompatible input.
"""
import argparse
import sys
from dataclasses import dataclass, field
from typing import List, Optional

from . import results, stats

DEFAULT_MIN_EFFECT = 0.05
DEFAULT_ALPHA = 0.05


@dataclass
class CaseComparison:
    name: str
    verdict: str
    baseline_ms: Optional[float] = None
    current_ms: Optional[float] = None
    change: Optional[float] = None  # current / baseline - 1, on median step time
    p_value: Optional[float] = None
    noise: Optional[float] = None
    note: str = ""


@dataclass
class Comparison:
    cases: List[CaseComparison] = field(default_factory=list)
    only_in_baseline: List[str] = field(default_factory=list)
    only_in_current: List[str] = field(default_factory=list)
    geomean_ratio: Optional[float] = None  # geometric mean of current / baseline over compared cases

    @property
    def regressed(self):
        return any(c.verdict in ("slower", "failed") for c in self.cases)


_TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}


def _samples(doc):
    """{case: (status, [per-repetition time in ms])} from the iteration entries (ddpbench runs and
    ddpbench-micro's Google Benchmark files alike)."""
    out = {}
    for b in doc["benchmarks"]:
        name = b["run_name"] if "run_name" in b else b["name"]
        status = b.get("ddpbench", {}).get("status", "failed" if b.get("error_occurred") else "ok")
        entry = out.setdefault(name, (status, []))
        if b["run_type"] == "iteration" and not b.get("error_occurred"):
            entry[1].append(float(b["real_time"]) * _TO_MS[b.get("time_unit", "ms")])
    return out


def compare(baseline, current, min_effect=DEFAULT_MIN_EFFECT, alpha=DEFAULT_ALPHA):
    base, cur = _samples(baseline), _samples(current)
    out = Comparison()
    out.only_in_baseline = sorted(set(base) - set(cur))
    out.only_in_current = sorted(set(cur) - set(base))
    ratios = []
    for name in [n for n in base if n in cur]:
        (b_status, b), (c_status, c) = base[name], cur[name]
        if not b:
            out.cases.append(CaseComparison(name, "skipped", note=f"not measured in the baseline ({b_status})"))
            continue
        if not c:
            verdict = "failed" if c_status in ("failed", "oom") else "skipped"
            out.cases.append(CaseComparison(name, verdict, baseline_ms=stats.median(b),
                                            note=f"not measured now ({c_status})"))
            continue
        b_med, c_med = stats.median(b), stats.median(c)
        change = c_med / b_med - 1
        _, p = stats.mann_whitney_u(b, c)
        noise = max(stats.cv(b), stats.cv(c))
        if p >= alpha or abs(change) < min_effect:
            verdict = "noisy" if noise >= min_effect else "same"
        elif abs(change) < noise:
            verdict = "noisy"
        else:
            verdict = "slower" if change > 0 else "faster"
        ratios.append(c_med / b_med)
        out.cases.append(CaseComparison(name, verdict, b_med, c_med, change, p, noise))
    if ratios:
        out.geomean_ratio = stats.geometric_mean(ratios)
    return out


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def format_table(comparison, markdown=False):
    header = ["case", "baseline ms", "current ms", "change", "p", "noise", "verdict"]
    rows = []
    for c in comparison.cases:
        rows.append([c.name, _fmt(c.baseline_ms, ".2f"), _fmt(c.current_ms, ".2f"),
                     "-" if c.change is None else f"{c.change * 100:+.1f}%", _fmt(c.p_value, ".3f"),
                     "-" if c.noise is None else f"{c.noise * 100:.1f}%", c.verdict + (f" ({c.note})" if c.note else "")])
    lines = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(r) + " |" for r in rows]
    else:
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
        fmt_row = lambda r: "  ".join(v.ljust(w) if i in (0, 6) else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
        lines.append(fmt_row(header))
        lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
        lines += [fmt_row(r) for r in rows]
    for name in comparison.only_in_baseline:
        lines.append(f"only in baseline: {name}")
    for name in comparison.only_in_current:
        lines.append(f"only in current: {name}")
    if comparison.geomean_ratio is not None:
        lines.append(f"geometric mean of current/baseline step time: {comparison.geomean_ratio:.3f} "
                     f"({(comparison.geomean_ratio - 1) * 100:+.1f}%)")
    slower = [c.name for c in comparison.cases if c.verdict in ("slower", "failed")]
    lines.append("verdict: " + (f"REGRESSION in {', '.join(slower)}" if slower else "no regression"))
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="ddpbench-compare", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline")
    p.add_argument("current")
    p.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT,
                   help="smallest relative change in median step time that counts (default 0.05 = 5%%)")
    p.add_argument("--alpha", type=float, default=DEFAULT_ALPHA, help="significance level of the U test (0.05)")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = p.parse_args(argv)
    if not 0 <= args.min_effect < 10 or not 0 < args.alpha < 1:
        p.error("--min-effect must be in [0, 10) and --alpha in (0, 1)")
    try:
        baseline, current = results.load(args.baseline), results.load(args.current)
    except results.ResultsError as e:
        print(f"ddpbench-compare: {e}", file=sys.stderr)
        return 2
    if results.dtype(baseline) != results.dtype(current):
        print(f"ddpbench-compare: {args.current}: ran --dtype {results.dtype(current)}, the baseline "
              f"{args.baseline} ran {results.dtype(baseline)}: compare runs of one dtype", file=sys.stderr)
        return 2
    comparison = compare(baseline, current, args.min_effect, args.alpha)
    print(format_table(comparison, markdown=args.markdown))
    return 1 if comparison.regressed else 0
