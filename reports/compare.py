"""Compare two ddpbench results files case by case: the CI regression gate.

Per case it takes one figure per repetition from both sides, the repetition's lower-quartile step
time (a shared machine only ever adds time to steps, in stretches; docs/ci.md measures why), or
its mean step where a side lacks per-step times, and the 95% confidence interval of current /
baseline (Welch's t-interval on their logarithms: repetitions are the independent units, steps
within one are not; with --paired, the t-interval of the ratios of repetitions run side by side, as
ddpbench-ab runs them), and gives a verdict that never claims more than that interval shows.
The gate's answer is about all cases at once ("REGRESSION" if any is slower), so --confidence is
the whole table's: with m intervals in it (a case with per-step times has two, its quartile's and
its mean's), each is taken at 1 - 2 (1 - confidence) / m, never below the confidence itself
(Bonferroni, one-sided: an interval errs above the truth half its error rate), so that an unchanged
build is called slower anywhere in the table at most 1 - confidence of the time; five cases at 95%
each would do it up to 10 x 2.5% of the time. (So is a false `faster` anywhere, or a false `same`.)

  slower        the whole interval lies above +min effect: a regression (so is a mean step whose
                own interval lies wholly above it: a stall in some steps moves no quartile)
  faster        the whole interval lies below -min effect
  same          the whole interval lies within +-min effect: any change is smaller than it
  inconclusive  the interval reaches past +-min effect on a side it has not settled: these samples
                cannot tell (the table gives the change they could resolve: more repetitions, or
                steadier ones, narrow it)
  failed        measured in the baseline; failed or out of memory now (sticky: a case that failed in
                any repetition is failed, whatever it kept)
  not run       measured in the baseline; the current run never reached it
  missing       measured in the baseline; absent from the current file

Exit codes: 0 no regression and every case resolved; 1 a regression (slower, failed) or a case the
current run did not measure (not run, missing: "NOT MEASURED now" in the verdict, not "REGRESSION"); 2 unusable input (unreadable, malformed, of another dtype, an interrupted run without
--allow-incomplete, a baseline that measured nothing); 3 no regression found, but some case is
inconclusive (--allow-inconclusive makes that 0).
"""
import argparse
import sys
from dataclasses import dataclass, field
from typing import List, Optional

from . import results, stats
from .args import OneLineParser

DEFAULT_MIN_EFFECT = 0.05
DEFAULT_CONFIDENCE = 0.95

REGRESSIONS = ("slower", "failed", "not run", "missing")
STATISTIC_QUARTILE, STATISTIC_MEAN = "lower-quartile step", "mean step"
EXIT_REGRESSION, EXIT_BAD_INPUT, EXIT_INCONCLUSIVE = 1, 2, 3


def _samples(b, c):
    """Both sides' per-repetition figures, of one statistic: lower-quartile steps where both
    sides have per-step times, else means (ddpbench-micro files, hand-made ones)."""
    if b.repetition_quartile_ms and c.repetition_quartile_ms:
        return STATISTIC_QUARTILE, b.repetition_quartile_ms, c.repetition_quartile_ms
    return STATISTIC_MEAN, b.repetition_ms, c.repetition_ms


@dataclass
class CaseComparison:
    name: str
    verdict: str
    baseline_ms: Optional[float] = None  # geometric mean over repetitions of `statistic`
    current_ms: Optional[float] = None
    change: Optional[float] = None  # current / baseline - 1, of the repetitions' geometric means
    statistic: str = ""  # what each repetition contributes: STATISTIC_QUARTILE or STATISTIC_MEAN
    interval: Optional[tuple] = None  # confidence interval of the change, (low, high)
    noise: Optional[float] = None  # the larger CV of the two sides' per-repetition `statistic`
    note: str = ""

    @property
    def resolution(self):
        """Half the interval's width: about the smallest change these samples can tell from none."""
        return None if self.interval is None else (self.interval[1] - self.interval[0]) / 2


@dataclass
class Comparison:
    cases: List[CaseComparison] = field(default_factory=list)
    only_in_current: List[str] = field(default_factory=list)
    not_in_baseline: List[str] = field(default_factory=list)  # present there, but not measured
    geomean_ratio: Optional[float] = None  # geometric mean of current / baseline over compared cases
    paired: bool = False  # intervals over pairs of repetitions run side by side (ddpbench-ab)
    confidence: float = DEFAULT_CONFIDENCE  # 1 - the chance of a false `slower` anywhere in the table
    interval_confidence: float = DEFAULT_CONFIDENCE  # of each interval: confidence shared among them

    @property
    def regressed(self):
        return any(c.verdict in REGRESSIONS for c in self.cases)

    @property
    def inconclusive(self):
        return [c for c in self.cases if c.verdict == "inconclusive"]

    def exit_code(self, allow_inconclusive=False):
        """The gate's answer: 1 a regression, 3 some case inconclusive (0 if allowed), else 0."""
        if self.regressed:
            return EXIT_REGRESSION
        return EXIT_INCONCLUSIVE if self.inconclusive and not allow_inconclusive else 0


def _verdict(interval, min_effect):
    low, high = interval[0] - 1, interval[1] - 1
    if low > min_effect:
        return "slower"
    if high < -min_effect:
        return "faster"
    if low >= -min_effect and high <= min_effect:
        return "same"
    return "inconclusive"


def _interval(b, c, confidence, paired):
    """The interval of current / baseline: from pairs where both sides' repetitions were run side by
    side (ddpbench-ab), else Welch's over the two samples."""
    if paired:
        return stats.paired_ratio_interval(b, c, confidence)
    return stats.ratio_interval(b, c, confidence)


def _check_the_mean(row, b_means, c_means, min_effect, confidence, paired):
    """The lower-quartile step cannot see a change that slows fewer than three quarters of the
    steps (a stall every few steps): the mean step can, where its noisier interval allows. A mean
    wholly slower beyond the minimum effect is a regression whatever the quartile says; a verdict
    of the quartile that the mean could not back says so in its note."""
    interval = _interval(b_means, c_means, confidence, paired)
    if interval is None:
        return
    mean_verdict = _verdict(interval, min_effect)
    if mean_verdict == "slower" and row.verdict != "slower":
        row.verdict = "slower"
        row.note = f"the mean step: {_pct(interval[0] - 1)} .. {_pct(interval[1] - 1)}"
    elif mean_verdict != row.verdict and row.verdict in ("same", "faster"):
        row.note = f"of the lower-quartile step; the mean step resolves only +-{(interval[1] - interval[0]) / 2 * 100:.1f}%"


def _intervals_of(b, c):
    """How many intervals the case of baseline samples b and current samples c gets: none where
    either side measured nothing or failed, two with per-step times (quartile and mean), else one."""
    if not b.measured or c is None or c.status in ("failed", "oom") or not c.measured:
        return 0
    return 2 if _samples(b, c)[0] == STATISTIC_QUARTILE else 1


def shared_confidence(confidence, intervals):
    """Each of `intervals` intervals' confidence, so that the chance of any of them lying wholly
    above the truth (a false `slower`: a false REGRESSION) is at most 1 - confidence. A two-sided
    interval errs above with half its error rate; no interval is taken below `confidence`."""
    return 1 - min(1 - confidence, 2 * (1 - confidence) / max(1, intervals))


def compare(baseline, current, min_effect=DEFAULT_MIN_EFFECT, confidence=DEFAULT_CONFIDENCE, paired=False):
    """paired: repetition i of both files was measured side by side (an interleaved A/B run), and a
    case's interval is taken over the pairs' ratios; a case whose sides kept different numbers of
    repetitions has no pairs and is inconclusive."""
    base, cur = results.case_samples(baseline), results.case_samples(current)
    out = Comparison(paired=paired, confidence=confidence)
    intervals = sum(_intervals_of(b, cur.get(name)) for name, b in base.items())
    confidence = out.interval_confidence = shared_confidence(confidence, intervals)
    out.only_in_current = [n for n in cur if n not in base]
    ratios = []
    for name, b in base.items():
        if not b.measured:
            out.not_in_baseline.append(name)
            continue
        b_ms = stats.geometric_mean(b.repetition_ms)  # the mean step, until the statistic is known
        c = cur.get(name)
        if c is None:
            out.cases.append(CaseComparison(name, "missing", b_ms, note="not in the current file"))
            continue
        if c.status in ("failed", "oom"):
            out.cases.append(CaseComparison(name, "failed", b_ms, note=f"{c.status} now: {c.reason}"))
            continue
        if not c.measured:
            why = c.reason or "no repetition measured"
            out.cases.append(CaseComparison(name, "not run", b_ms, note=f"{c.status}: {why}"))
            continue
        statistic, b_samples, c_samples = _samples(b, c)
        b_ms, c_ms = stats.geometric_mean(b_samples), stats.geometric_mean(c_samples)
        ratios.append(c_ms / b_ms)
        row = CaseComparison(name, "inconclusive", b_ms, c_ms, c_ms / b_ms - 1, statistic=statistic,
                             noise=max(stats.cv(b_samples), stats.cv(c_samples)))
        interval = _interval(b_samples, c_samples, confidence, paired)
        if interval is None:
            row.note = ("needs 2 or more pairs of repetitions run side by side" if paired
                        else "needs 2 or more repetitions a side")
        else:
            row.interval = (interval[0] - 1, interval[1] - 1)
            row.verdict = _verdict(interval, min_effect)
            if row.verdict == "inconclusive":
                row.note = f"resolves only +-{row.resolution * 100:.1f}%"
            if statistic == STATISTIC_QUARTILE:
                _check_the_mean(row, b.repetition_ms, c.repetition_ms, min_effect, confidence, paired)
        out.cases.append(row)
    if ratios:
        out.geomean_ratio = stats.geometric_mean(ratios)
    return out


def _printable(text):
    """A name from a file, safe on a terminal: control characters shown as escapes."""
    return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in str(text))


def _markdown_cell(text):
    """Safe in a GitHub markdown table cell: no HTML, no column break, no line break."""
    text = _printable(text)
    for raw, escaped in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("|", "\\|"), ("`", "\\`")):
        text = text.replace(raw, escaped)
    return text


def _pct(v):
    return "-" if v is None else f"{v * 100:+.1f}%"


# As Google Benchmark's console output does, each row is written in the unit its times need (a
# micro-benchmark's 3 us is not "0.00 ms"): results.TO_MS's units, largest first.
TIME_UNITS = tuple(sorted(results.TO_MS.items(), key=lambda unit: -unit[1]))


def _row_times(*values_ms):
    """The row's times ("-" for None) in the largest unit in which the smallest of them is >= 1."""
    known = [v for v in values_ms if v is not None]
    smallest = min(known) if known else 1.0
    unit, scale = next(((u, f) for u, f in TIME_UNITS if smallest >= f), TIME_UNITS[-1])
    return ["-" if v is None else f"{v / scale:.2f} {unit}" for v in values_ms]


def format_table(comparison, markdown=False, min_effect=DEFAULT_MIN_EFFECT):
    header = ["case", "baseline", "current", "change", f"{comparison.interval_confidence * 100:.4g}% interval",
              "noise", "verdict"]
    rows = []
    for c in comparison.cases:
        rows.append([c.name, *_row_times(c.baseline_ms, c.current_ms), _pct(c.change),
                     "-" if c.interval is None else f"{_pct(c.interval[0])} .. {_pct(c.interval[1])}",
                     "-" if c.noise is None else f"{c.noise * 100:.1f}%", c.verdict + (f" ({c.note})" if c.note else "")])
    lines = []
    if markdown:
        lines.append("| " + " | ".join(header) + " |")
        lines.append("|" + "---|" * len(header))
        lines += ["| " + " | ".join(_markdown_cell(v) for v in r) + " |" for r in rows]
    else:
        rows = [[_printable(v) for v in r] for r in rows]
        widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]

        def fmt_row(r):
            return "  ".join(v.ljust(w) if i in (0, 6) else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))
        lines.append(fmt_row(header))
        lines.append("-" * (sum(widths) + 2 * (len(widths) - 1)))
        lines += [fmt_row(r) for r in rows]
    show = _markdown_cell if markdown else _printable
    for name in comparison.not_in_baseline:
        lines.append(f"not measured in the baseline, not compared: {show(name)}")
    for name in comparison.only_in_current:
        lines.append(f"only in current, not compared: {show(name)}")
    statistics = sorted({c.statistic for c in comparison.cases if c.statistic})
    if statistics:
        lines.append(f"per repetition: its {' or '.join(statistics)} time (the geometric mean over repetitions; "
                     f"noise: their CV)")
        lines.append(f"intervals at {comparison.interval_confidence * 100:.4g}% each: an unchanged build is called "
                     f"slower anywhere in the table at most {(1 - comparison.confidence) * 100:.3g}% of the time "
                     f"(Bonferroni)")
        if not comparison.paired:
            lines.append("two separate runs: the intervals hold each run's own spread, not the machine's drift between "
                         "the runs (ddpbench-ab runs both sides side by side)")
    if comparison.geomean_ratio is not None:
        lines.append(f"geometric mean of current/baseline step time: {comparison.geomean_ratio:.3f} "
                     f"({(comparison.geomean_ratio - 1) * 100:+.1f}%)")
    lines.append("verdict: " + overall_verdict(comparison, min_effect, show))
    return "\n".join(lines)


def overall_verdict(comparison, min_effect, show=_printable):
    # A case the current run did not measure fails the gate as a regression does (a crash that drops
    # cases must not pass), but it is not called slower: nothing says it is.
    regressed = [show(c.name) for c in comparison.cases if c.verdict in ("slower", "failed")]
    unmeasured = [show(c.name) for c in comparison.cases if c.verdict in ("not run", "missing")]
    if regressed or unmeasured:
        parts = [f"REGRESSION in {', '.join(regressed)}"] if regressed else []
        if unmeasured:
            parts.append(f"NOT MEASURED now (measured in the baseline): {', '.join(unmeasured)}")
        return "; ".join(parts)
    unsure = comparison.inconclusive
    if unsure:
        text = (f"cannot tell whether {len(unsure)} of {len(comparison.cases)} case(s) changed by "
                f"{min_effect * 100:g}% ({', '.join(show(c.name) for c in unsure)})")
        rest = len(comparison.cases) - len(unsure)
        return text + (f"; the other {rest}: none slower beyond {min_effect * 100:g}%" if rest else "")
    return f"no regression beyond {min_effect * 100:g}%"


def main(argv=None):
    p = OneLineParser(prog="ddpbench-compare", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline")
    p.add_argument("current")
    p.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT,
                   help="smallest relative change in step time that counts (default 0.05 = 5%%)")
    p.add_argument("--confidence", type=float, default=DEFAULT_CONFIDENCE,
                   help="1 - the chance of a false REGRESSION anywhere in the table (default 0.95; "
                        "the intervals share it)")
    p.add_argument("--allow-incomplete", action="store_true",
                   help="compare what an interrupted run measured instead of refusing it")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 rather than 3 when some case is inconclusive and nothing regressed")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    p.add_argument("--paired", action="store_true",
                   help="repetition i of both files was run side by side (ddpbench-ab's files): take the "
                        "interval over the pairs' ratios")
    args = p.parse_args(argv)
    if not 0 <= args.min_effect < 10:
        p.error(f"--min-effect: {args.min_effect!r} is not in [0, 10)")
    if not 0.5 <= args.confidence < 1:
        p.error(f"--confidence: {args.confidence!r} is not in [0.5, 1)")
    try:
        baseline, current = results.load(args.baseline), results.load(args.current)
        check_comparable(args, baseline, current)
        comparison = compare(baseline, current, args.min_effect, args.confidence, paired=args.paired)
    except results.ResultsError as e:
        print(f"ddpbench-compare: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_table(comparison, markdown=args.markdown, min_effect=args.min_effect))
    return comparison.exit_code(args.allow_inconclusive)


def check_comparable(args, baseline, current):
    """Raises ResultsError for a pair of files whose comparison would mean nothing."""
    if results.is_micro(baseline) != results.is_micro(current):
        micro = args.baseline if results.is_micro(baseline) else args.current
        raise results.ResultsError(f"{micro} is a ddpbench-micro file and the other a ddpbench run: "
                                   f"compare files of one kind")
    if results.dtype(baseline) != results.dtype(current):
        raise results.ResultsError(f"{args.current}: ran --dtype {results.dtype(current)}, the baseline "
                                   f"{args.baseline} ran {results.dtype(baseline)}: compare runs of one dtype")
    for path, doc in ((args.baseline, baseline), (args.current, current)):
        if not args.allow_incomplete and not results.is_complete(doc):
            raise results.ResultsError(f"{path}: an interrupted run (complete: false); rerun it, or pass "
                                       f"--allow-incomplete to compare what it measured")
    if not any(c.measured for c in results.case_samples(baseline, args.baseline).values()):
        raise results.ResultsError(f"{args.baseline}: the baseline measured no case: nothing to compare against")
    results.case_samples(current, args.current)  # refuses impossible times, naming the file
