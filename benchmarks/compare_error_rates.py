#!/usr/bin/python3
"""How often ddpbench-compare is wrong, measured on real ddpbench runs of this machine.

For each round it runs one baseline and then, in an order shuffled per round, an A/A run (the same
build and settings) and one run per injected slowdown (--slow-by: every step sleeps that fraction
of its own time inside the timed step), and compares each against the baseline with
ddpbench-compare's own code. It reports, per setting:
  - the A/A false-positive rate: rounds where the gate said REGRESSION (exit 1) on no change;
  - the detection rate of each slowdown: rounds where the gate said REGRESSION;
  - how often each said "cannot tell" (exit 3) instead,
with Wilson 95% intervals, since a handful of rounds pins a rate down only so far.

    /usr/bin/python3 benchmarks/compare_error_rates.py --rounds 10 --setting short [--out rates.json] [--keep DIR]

--keep DIR keeps every results file it ran (SETTING-ROUND-CONDITION.json), so that the verdicts can
be checked, or a later statistic tried on the same runs, without running them again.

Settings: `default` is what `ddpbench --strategy all` does (adaptive sampling to +-3%); `short`
is a CI-friendly fixed run (3 repetitions of 10 steps). Both run --parity-steps 0: parity is not
what is being measured. `ab` judges with ddpbench-ab instead: per round and condition, one
interleaved A/B run of the same executable against itself (the slowdown, if any, on the current
side), its exit code the gate's; it runs `ab_args` steps a repetition and --max-time AB_MAX_TIME.
"""
import argparse
import json
import math
import os
import random
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from reports import ab, compare, results  # noqa: E402

SETTINGS = {
    "default": [],
    "short": ["--repetitions", "3", "--steps", "10", "--warmup", "2"],
    "ab": ["--steps", "30", "--warmup", "5"],
}
AB_MAX_TIME = 300
AB_MAX_ROUNDS = 20  # ddpbench-ab's default, which run_ab leaves as it is
AB = os.path.join(ROOT, "scripts", "ddpbench-ab")


def wilson(successes, n, z=1.96):
    """Wilson score interval of a binomial proportion: honest at 0 of n and n of n."""
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (max(0.0, centre - half), min(1.0, centre + half))


def run_ddpbench(exe, args, path, slow_by):
    cmd = [exe, "--device", "cpu", "--parity-steps", "0", "--json", path, "--slow-by", str(slow_by), *args]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise SystemExit(f"compare_error_rates: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return results.load(path)


def gate(baseline, current, paired=False):
    """ddpbench-compare's exit code for the pair, and its verdict per case; paired: a pair that
    ddpbench-ab left, judged at the confidence of each of its looks."""
    confidence = ab.look_confidence(compare.DEFAULT_CONFIDENCE, AB_MAX_ROUNDS) if paired else compare.DEFAULT_CONFIDENCE
    c = compare.compare(baseline, current, confidence=confidence, paired=paired)
    return c.exit_code(), {case.name: case.verdict for case in c.cases}


def run_ab(exe, args, out, slow_by):
    """ddpbench-ab of `exe` against itself, the current side slowed by `slow_by`: its exit code, and
    the verdict per case from the files it wrote."""
    cmd = [AB, exe, exe, "--out", out, "--max-time", str(AB_MAX_TIME), f"--current-arg=--slow-by={slow_by}",
           "--", "--device", "cpu", *args]
    r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode not in (0, 1, 3):
        raise SystemExit(f"compare_error_rates: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    _, verdicts = gate(results.load(os.path.join(out, "baseline.json")), results.load(os.path.join(out, "current.json")),
                       paired=True)
    return r.returncode, verdicts


def measure(exe, setting, extra, rounds, slowdowns, workdir, log):
    conditions = [0.0] + slowdowns
    outcomes = {s: {"regression": 0, "inconclusive": 0, "pass": 0, "case_verdicts": {}} for s in conditions}
    seconds = []
    for i in range(rounds):
        started = time.monotonic()
        if setting != "ab":
            base = run_ddpbench(exe, SETTINGS[setting] + extra, os.path.join(workdir, f"{setting}-{i}-base.json"), 0.0)
        order = conditions[:]
        random.shuffle(order)  # the machine's drift falls on no condition in particular
        for s in order:
            if setting == "ab":
                code, verdicts = run_ab(exe, SETTINGS[setting] + extra, os.path.join(workdir, f"ab-{i}-{s}"), s)
            else:
                cur = run_ddpbench(exe, SETTINGS[setting] + extra, os.path.join(workdir, f"{setting}-{i}-{s}.json"), s)
                code, verdicts = gate(base, cur)
            o = outcomes[s]
            o[{1: "regression", 3: "inconclusive", 0: "pass"}[code]] += 1
            for name, v in verdicts.items():
                o["case_verdicts"].setdefault(name, {}).setdefault(v, 0)
                o["case_verdicts"][name][v] += 1
        seconds.append(time.monotonic() - started)
        log(f"{setting}: round {i + 1}/{rounds} in {seconds[-1]:.0f} s")
    return {"setting": setting, "args": SETTINGS[setting] + extra, "rounds": rounds,
            "seconds_per_round": sum(seconds) / len(seconds), "conditions": {str(k): v for k, v in outcomes.items()}}


def analyze(workdir, setting, slowdowns):
    """The counts again from the files a --keep run left, over its complete rounds: to check its
    verdicts, or read a run stopped early."""
    conditions = [0.0] + slowdowns
    outcomes = {s: {"regression": 0, "inconclusive": 0, "pass": 0, "case_verdicts": {}} for s in conditions}
    def complete(i):
        if setting == "ab":  # the pair each ddpbench-ab left, judged as at its last look
            return all(os.path.exists(os.path.join(workdir, f"ab-{i}-{s}", "current.json")) for s in conditions)
        return all(os.path.exists(os.path.join(workdir, f"{setting}-{i}-{s}.json")) for s in ["base"] + conditions)

    i = 0
    while complete(i):
        if setting != "ab":
            base = results.load(os.path.join(workdir, f"{setting}-{i}-base.json"))
        for s in conditions:
            if setting == "ab":
                pair = [results.load(os.path.join(workdir, f"ab-{i}-{s}", f"{side}.json")) for side in ("baseline", "current")]
                code, verdicts = gate(*pair, paired=True)
            else:
                code, verdicts = gate(base, results.load(os.path.join(workdir, f"{setting}-{i}-{s}.json")))
            o = outcomes[s]
            o[{1: "regression", 3: "inconclusive", 0: "pass"}[code]] += 1
            for name, v in verdicts.items():
                o["case_verdicts"].setdefault(name, {}).setdefault(v, 0)
                o["case_verdicts"][name][v] += 1
        i += 1
    return {"setting": setting, "args": SETTINGS[setting], "rounds": i, "seconds_per_round": float("nan"),
            "conditions": {str(k): v for k, v in outcomes.items()}}


def wrong_claims(injected, case_verdicts, min_effect=compare.DEFAULT_MIN_EFFECT):
    """(wrong, decided): case verdicts that claim what the injection contradicts, among those that
    claim anything. A/A: any slower or faster. A slowdown beyond the minimum effect: same or faster.
    One within it: faster."""
    wrong = decided = 0
    for verdicts in case_verdicts.values():
        for v, count in verdicts.items():
            if v not in ("slower", "faster", "same"):
                continue
            decided += count
            if injected == 0:
                wrong += count if v in ("slower", "faster") else 0
            elif injected > min_effect:
                wrong += count if v in ("same", "faster") else 0
            else:
                wrong += count if v == "faster" else 0
    return wrong, decided


def summary_lines(measured):
    lines = []
    for m in measured:
        n = m["rounds"]
        pace = "" if math.isnan(m["seconds_per_round"]) else f", {m['seconds_per_round']:.0f} s a round"
        lines.append(f"setting {m['setting']} ({' '.join(m['args']) or 'defaults'}), {n} rounds{pace}:")
        lines.append(f"  {'injected':>9}  {'REGRESSION (exit 1)':>26}  {'cannot tell (exit 3)':>26}  {'pass (exit 0)':>13}"
                     f"  {'wrong case verdicts':>19}")
        for s, o in m["conditions"].items():
            lo, hi = wilson(o["regression"], n)
            ilo, ihi = wilson(o["inconclusive"], n)
            label = "A/A" if float(s) == 0 else f"+{float(s) * 100:.0f}%"
            lines.append(f"  {label:>9}  {o['regression']:>3}/{n} ({lo * 100:3.0f}%..{hi * 100:3.0f}%)"
                         f"{'':>6}  {o['inconclusive']:>3}/{n} ({ilo * 100:3.0f}%..{ihi * 100:3.0f}%){'':>6}  "
                         f"{o['pass']:>3}/{n}  {'%d of %d decided' % wrong_claims(float(s), o['case_verdicts']):>19}")
    return lines


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--ddpbench", default=os.path.join(os.environ.get("DDPBENCH_BUILD_DIR", os.path.join(ROOT, "build")),
                                                      "ddpbench"))
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--setting", choices=["default", "short", "ab", "both"], default="both")
    p.add_argument("--slowdowns", default="0.05,0.10,0.20", help="comma list of injected slowdowns")
    p.add_argument("--strategy", default="all")
    p.add_argument("--workload", default="mlp")
    p.add_argument("--seed", type=int, default=1, help="of the shuffled order within a round")
    p.add_argument("--out", help="write the counts as JSON here")
    p.add_argument("--keep", help="keep every results file in this directory (made if missing)")
    p.add_argument("--analyze", metavar="DIR", help="run nothing: count again from the files --keep left in DIR")
    args = p.parse_args(argv)
    random.seed(args.seed)
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    extra = ["--strategy", args.strategy, "--workload", args.workload]
    measured = []
    if args.analyze:
        measured = [analyze(args.analyze, setting, slowdowns)
                    for setting in (["default", "short"] if args.setting == "both" else [args.setting])]
        print("\n".join(summary_lines([m for m in measured if m["rounds"]])))
        return 0
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        workdir = args.keep or scratch
        for setting in (["default", "short"] if args.setting == "both" else [args.setting]):
            measured.append(measure(args.ddpbench, setting, extra, args.rounds, slowdowns, workdir,
                                    lambda line: print(line, file=sys.stderr, flush=True)))
    print("\n".join(summary_lines(measured)))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"machine": os.uname().nodename, "cpus": os.cpu_count(), "measured": measured}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
