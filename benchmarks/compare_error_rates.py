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

`ab-replay` measures ddpbench-ab at its defaults with many more gates than ab can run in a session:
    compare_error_rates.py --setting ab-replay --rounds 150 --slowdowns 0.1 --keep DIR   # record
    compare_error_rates.py --setting ab-replay --slowdowns 0.1 --analyze DIR             # replay
The first records ddpbench-ab's rounds (a baseline, an A/A side and a side per slowdown, one
repetition each, strategy by strategy; a later call adds rounds to DIR). The second replays
ddpbench-ab's own stopping rule and verdicts (reports/ab.sequential and judge) on every window of
20 consecutive recorded rounds and on --resamples sequences drawn with replacement, with each
run's recorded seconds standing in for the clock, under three ways of sharing the confidence
among the intervals (RULES: ddpbench-compare's, a stricter two-sided one, and none).
"""
import argparse
import itertools
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
# A recorded run with no results after this long is hung: the recording stops there, saying so.
RECORD_RUN_LIMIT_SECONDS = 3600
AB_MAX_ROUNDS = ab.DEFAULT_MAX_ROUNDS  # which run_ab leaves as it is, and a replay keeps
AB = os.path.join(ROOT, "scripts", "ddpbench-ab")
BASE = "base"  # the baseline side of a recorded round; the others are named by their slowdown


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


def tally(o, code, verdicts):
    """One gate's outcome into its condition's counts: the exit code's kind and each case's verdict."""
    o[{1: "regression", 3: "inconclusive", 0: "pass"}[code]] += 1
    for name, v in verdicts.items():
        o["case_verdicts"].setdefault(name, {}).setdefault(v, 0)
        o["case_verdicts"][name][v] += 1


def record_path(workdir, side, i, strategy):
    return os.path.join(workdir, "record", f"{side}-{i}-{strategy}.json")


def record(exe, extra, rounds, slowdowns, workdir, log):
    """Setting ab-replay, its measuring half: a long sequence of ddpbench-ab's rounds, each holding
    a baseline, an A/A side and one side per slowdown: one repetition of every case each, strategy
    by strategy, the sides of a strategy back to back in an order that rotates through every
    permutation from round to round and strategy to strategy. Every run's own file and its wall
    time (record/seconds.jsonl) are kept, so a later session adds rounds to the same sequence: it
    starts at the first round not complete."""
    os.makedirs(os.path.join(workdir, "record"), exist_ok=True)
    args = ["--device", "cpu", *SETTINGS["ab"], *extra, "--parity-steps", "0"]
    each = ab.strategies(exe, args)
    sides = [BASE] + [str(s) for s in [0.0] + slowdowns]
    orders = list(itertools.permutations(sides))
    seconds_log = os.path.join(workdir, "record", "seconds.jsonl")
    i = 0
    while all(os.path.exists(record_path(workdir, side, i, strategy)) for side in sides for strategy in each):
        i += 1
    first = i
    while i < first + rounds:
        started = time.monotonic()
        for j, strategy in enumerate(each):
            for side in orders[(i + j) % len(orders)]:
                slow = [] if side == BASE or float(side) == 0 else ["--slow-by", side]
                path = record_path(workdir, side, i, strategy)
                t0 = time.time()
                ab.run_one(f"side {side} of {strategy}, round {i + 1}", exe, ab.with_strategy(args + slow, strategy),
                           path, limit=RECORD_RUN_LIMIT_SECONDS)
                with open(seconds_log, "a") as f:
                    f.write(json.dumps({"round": i, "strategy": strategy, "side": side, "started": t0,
                                        "seconds": time.time() - t0}) + "\n")
        log(f"ab-replay: recorded round {i} ({time.monotonic() - started:.0f} s)")
        i += 1


class Recording:
    """The rounds `record` left in DIR/record: the complete ones, their strategies in run order,
    each run's seconds, and its results file (each read once)."""

    def __init__(self, workdir, slowdowns):
        self.workdir = workdir
        self.sides = [BASE] + [str(s) for s in [0.0] + slowdowns]
        self.seconds, self.strategies = {}, []
        with open(os.path.join(workdir, "record", "seconds.jsonl")) as f:
            for line in f:
                run = json.loads(line)
                self.seconds[run["round"], run["strategy"], run["side"]] = run["seconds"]
                if run["strategy"] not in self.strategies:
                    self.strategies.append(run["strategy"])
        self.rounds = 0
        while all((self.rounds, s, side) in self.seconds for s in self.strategies for side in self.sides):
            self.rounds += 1
        self._docs = {}

    def path(self, side, i, strategy):
        return record_path(self.workdir, side, i, strategy)

    def load(self, path):
        if path not in self._docs:
            self._docs[path] = results.load(path)
        return self._docs[path]

    def paired_log_ratios(self, side):
        """Per strategy's case: the log ratios side / baseline of the rounds' lower-quartile steps,
        in round order."""
        docs = {s: ab.merge([[self.path(s, i, st) for st in self.strategies] for i in range(self.rounds)], self.load)
                for s in (BASE, side)}
        base, cur = results.case_samples(docs[BASE]), results.case_samples(docs[side])
        return {name: [math.log(c / b) for b, c in zip(base[name].repetition_quartile_ms, cur[name].repetition_quartile_ms)]
                for name in base}


RULES = {
    # the confidence handed to ddpbench-compare at a look, so that each of its m intervals gets:
    "shared": lambda each, m: each,  # compare's own: 1 - 2 (1 - each) / m, a false REGRESSION at most 1 - each
    "two-sided": lambda each, m: 1 - (1 - each) / 2,  # 1 - (1 - each) / m: every verdict together at `each`
    "alone": lambda each, m: 1 - (1 - each) * m / 2,  # `each` per interval (the rule before they shared it)
}


def replay_one(rec, side, order, rule="shared", max_rounds=AB_MAX_ROUNDS, max_time=ab.DEFAULT_MAX_TIME):
    """ddpbench-ab's own stopping rule and verdicts (reports/ab.sequential, judge) on recorded
    rounds `order` of the baseline and `side`: its exit code, per-case verdicts, rounds and
    seconds. rule: RULES, to show what sharing the confidence among the intervals changes on the
    same data."""
    # every case has per-step times (a quartile and a mean interval); one workload: a case a strategy
    intervals = 2 * len(rec.strategies)
    elapsed, slowest = [], {}

    def next_round(n):
        # ddpbench-ab's clock, run by run: a run starts only where FIT_FACTOR times its side's
        # slowest earlier run of that strategy fits before max_time, else the round is left unfinished.
        i, spent = order[n], 0.0
        for j, st in enumerate(rec.strategies):
            for s in ((BASE, side) if (n + j) % 2 == 0 else (side, BASE)):
                if (s, st) in slowest and ab.FIT_FACTOR * slowest[s, st] > max_time - sum(elapsed) - spent:
                    raise ab.OutOfTime()
                spent += rec.seconds[i, st, s]
                slowest[s, st] = max(rec.seconds[i, st, s], slowest.get((s, st), 0.0))
        elapsed.append(spent)
        return spent

    def judge_at(n, each):
        confidence = RULES[rule](each, intervals)
        paths = {label: [[rec.path(s, i, st) for st in rec.strategies] for i in order[:n]]
                 for label, s in (("baseline", BASE), ("current", side))}
        return ab.judge(paths, compare.DEFAULT_MIN_EFFECT, confidence, rec.load)[1]

    comparison, n, _ = ab.sequential(next_round, judge_at, max_rounds, max_time, compare.DEFAULT_CONFIDENCE)
    return (comparison.exit_code(), {c.name: c.verdict for c in comparison.cases}, n, sum(elapsed))


def replay(workdir, slowdowns, resamples, seed, log):
    """Setting ab-replay, its judging half: ddpbench-ab replayed on every window of AB_MAX_ROUNDS
    consecutive recorded rounds (a gate started at each round: what the machine's stretches do to
    it; neighbouring windows share rounds, so they are far from independent) and on `resamples`
    sequences drawn from all rounds with replacement (rounds as exchangeable, which the lag-1
    autocorrelations printed beside them check)."""
    rec = Recording(workdir, slowdowns)
    if rec.rounds < AB_MAX_ROUNDS:
        raise SystemExit(f"compare_error_rates: {workdir}: {rec.rounds} complete rounds recorded; "
                         f"replaying ddpbench-ab needs {AB_MAX_ROUNDS}")
    rng = random.Random(seed)
    designs = {"windows": [list(range(s, s + AB_MAX_ROUNDS)) for s in range(rec.rounds - AB_MAX_ROUNDS + 1)],
               "resampled": [[rng.randrange(rec.rounds) for _ in range(AB_MAX_ROUNDS)] for _ in range(resamples)]}
    measured = []
    for design, orders in designs.items():
        for rule in RULES:
            outcomes = {float(s): {"regression": 0, "inconclusive": 0, "pass": 0, "case_verdicts": {},
                                   "rounds": 0, "seconds": 0.0} for s in rec.sides[1:]}
            for s in rec.sides[1:]:
                o = outcomes[float(s)]
                for order in orders:
                    code, verdicts, n, seconds = replay_one(rec, s, order, rule)
                    tally(o, code, verdicts)
                    o["rounds"] += n / len(orders)
                    o["seconds"] += seconds / len(orders)
            measured.append({"setting": f"ab-replay, {design}, intervals {rule}", "args": SETTINGS["ab"], "rounds": len(orders),
                             "seconds_per_round": float("nan"), "conditions": {str(k): v for k, v in outcomes.items()},
                             "recorded_rounds": rec.rounds})
            log(f"ab-replay: {design}, {rule}: {len(orders)} replays judged")
    return rec, measured


def replay_lines(rec, measured):
    """What each replay decided after how long, and whether the recorded rounds behave as
    exchangeable: per case and side, the mean paired ratio, its spread and its lag-1 autocorrelation."""
    lines = [f"recorded: {rec.rounds} rounds of {', '.join(rec.sides)} over {', '.join(rec.strategies)}"]
    for side in rec.sides[1:]:
        for name, logs in rec.paired_log_ratios(side).items():
            mean = sum(logs) / len(logs)
            var = sum((x - mean) ** 2 for x in logs) / (len(logs) - 1)
            lag1 = sum((a - mean) * (b - mean) for a, b in zip(logs, logs[1:])) / (var * (len(logs) - 1)) if var else 0
            lines.append(f"  {'A/A' if float(side) == 0 else '+%g%%' % (float(side) * 100):>5} {name:<32} "
                         f"ratio {math.exp(mean):.3f}, sd of log ratio {math.sqrt(var):.3f}, lag-1 autocorrelation {lag1:+.2f}")
    for m in measured:
        for s, o in m["conditions"].items():
            lines.append(f"  {m['setting']}: {'A/A' if float(s) == 0 else '+%g%%' % (float(s) * 100)} stopped after "
                         f"{o['rounds']:.1f} rounds, {o['seconds']:.0f} s on average")
    return lines


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
            tally(outcomes[s], code, verdicts)
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
            tally(outcomes[s], code, verdicts)
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
    p.add_argument("--setting", choices=["default", "short", "ab", "ab-replay", "both"], default="both")
    p.add_argument("--slowdowns", default="0.05,0.10,0.20", help="comma list of injected slowdowns")
    p.add_argument("--strategy", default="all")
    p.add_argument("--workload", default="mlp")
    p.add_argument("--seed", type=int, default=1, help="of the shuffled order within a round")
    p.add_argument("--out", help="write the counts as JSON here")
    p.add_argument("--keep", help="keep every results file in this directory (made if missing)")
    p.add_argument("--analyze", metavar="DIR", help="run nothing: count again from the files --keep left in DIR "
                   "(with --setting ab-replay: replay ddpbench-ab on the rounds recorded there)")
    p.add_argument("--resamples", type=int, default=400,
                   help="ab-replay: sequences of rounds drawn with replacement to replay (default 400)")
    args = p.parse_args(argv)
    random.seed(args.seed)
    slowdowns = [float(s) for s in args.slowdowns.split(",")]
    extra = ["--strategy", args.strategy, "--workload", args.workload]
    measured = []
    if args.analyze and args.setting == "ab-replay":
        rec, measured = replay(args.analyze, slowdowns, args.resamples, args.seed,
                               lambda line: print(line, file=sys.stderr, flush=True))
        print("\n".join(summary_lines(measured) + replay_lines(rec, measured)))
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"machine": os.uname().nodename, "cpus": os.cpu_count(), "measured": measured}, f, indent=2)
        return 0
    if args.analyze:
        measured = [analyze(args.analyze, setting, slowdowns)
                    for setting in (["default", "short"] if args.setting == "both" else [args.setting])]
        print("\n".join(summary_lines([m for m in measured if m["rounds"]])))
        return 0
    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
    if args.setting == "ab-replay":
        if not args.keep:
            p.error("--setting ab-replay records into --keep DIR (and adds rounds to what is there)")
        record(args.ddpbench, extra, args.rounds, slowdowns, args.keep, lambda line: print(line, file=sys.stderr, flush=True))
        return 0
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
