"""ddpbench-ab: compare two ddpbench builds (or two settings) run side by side, until the comparison is
decided or the time is up.

    ddpbench-ab BASELINE_EXE CURRENT_EXE --out DIR [options] -- DDPBENCH_ARGS...

A shared machine drifts: on this project's 2-core VM whole seconds run 1.6x slower, so two runs
made one after the other (a stored baseline, then the current build) differ by more than many
regressions, and ddpbench-compare can only say "cannot tell". Here the two executables run in
rounds, one repetition of every case each per round, strategy by strategy, the two sides of a
strategy back to back in alternating order (A B, B A, ...): both sides of a case's pair see nearly
the same stretch of the machine, and the comparison is taken over the rounds' ratios (a paired
interval, ddpbench-compare --paired), in which the drift cancels.

It looks at the comparison after 5, 10, 20 and 40 rounds (up to --max-rounds) and stops at
the first look where every case is decided (slower, faster or same), or when --max-time has
passed. Looking several times and stopping at a decisive one would make a 95% interval wrong more
often than 5%; each look uses the confidence --confidence divided among the looks (Bonferroni),
and within a look among the cases' intervals (ddpbench-compare), so the whole procedure, every
case and every look, keeps --confidence.

It writes DIR/rounds/ (every run's own results file, SIDE-ROUND-STRATEGY.json), DIR/baseline.json and DIR/current.json (each
side's rounds as repetitions, which ddpbench-compare --paired reads again) and prints
ddpbench-compare's table. Exit codes are ddpbench-compare's: 0 no regression, every case decided;
1 a regression; 2 bad input (a ddpbench run refused its arguments); 3 no regression, some case
still undecided.
"""
import argparse
import copy
import ctypes
import json
import os
import signal
import subprocess
import sys
import time

from . import compare, files, results
from .args import EXIT_BAD_INPUT, OneLineParser

LOOKS = (5, 10, 20, 40)
DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TIME = 20, 600
# Flags the rounds set themselves: one repetition, fixed, into a file of the round's own.
OWNED_FLAGS = ("--repetitions", "--target-precision", "--min-time", "--max-time", "--json", "--no-json")


class RunFailed(Exception):
    """A ddpbench run ended without a results file: its exit code and its last line of stderr."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


def looks(max_rounds):
    """The round counts at which the comparison is looked at: LOOKS up to max_rounds, and
    max_rounds itself."""
    planned = [n for n in LOOKS if n < max_rounds]
    return planned + [max_rounds]


def look_confidence(confidence, max_rounds):
    """Each look's confidence, so that all of them together keep `confidence` (Bonferroni)."""
    return 1 - (1 - confidence) / len(looks(max_rounds))


def merge(rounds, load=results.load):
    """One results document holding each round's repetition, in round order. A round is the list
    of files its runs wrote (one per strategy), each with one repetition of its cases."""
    merged = None
    for i, paths in enumerate(rounds):
        for path in paths:
            doc = load(path)
            if merged is None:
                merged = copy.deepcopy(doc)
                merged["benchmarks"] = []
            for b in doc["benchmarks"]:
                if b["run_type"] == "iteration":
                    b = copy.deepcopy(b)
                    b["repetition_index"], b["repetitions"] = i, len(rounds)
                    merged["benchmarks"].append(b)
    merged["context"]["ddpbench_ab"] = {"rounds": len(rounds),
                                        "files": [[os.path.basename(p) for p in paths] for paths in rounds]}
    return merged


def strategies(exe, ddpbench_args):
    """The strategies the runs name (--strategy), each of which a round runs on its own: `all`, or
    no --strategy, is every strategy `exe --list` names."""
    named = None
    for i, a in enumerate(ddpbench_args):
        if a == "--strategy" and i + 1 < len(ddpbench_args):
            named = ddpbench_args[i + 1]
        elif a.startswith("--strategy="):
            named = a.split("=", 1)[1]
    if named is not None and named != "all":
        return named.split(",")
    try:
        listing = subprocess.run([exe, "--list"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError) as e:
        raise RunFailed(EXIT_BAD_INPUT, f"{exe} --list: {e}")
    lines = listing.split("strategies:", 1)[-1].split("workloads:", 1)[0].splitlines()
    return [line.split()[0] for line in lines if line.strip()]


def with_strategy(ddpbench_args, strategy):
    """The runs' arguments with --strategy set to `strategy` alone."""
    out, skip = [], False
    for a in ddpbench_args:
        if skip:
            skip = False
            continue
        if a == "--strategy":
            skip = True
            continue
        if not a.startswith("--strategy="):
            out.append(a)
    return out + ["--strategy", strategy]


def _die_with_parent():
    """In the child before exec: a killed ddpbench-ab takes its running ddpbench with it."""
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def run_one(side, exe, args, path):
    """One repetition of every case; a run that fails a case still leaves its results file."""
    cmd = [exe, "--repetitions", "1", "--json", path, *args]
    try:
        r = subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                           preexec_fn=_die_with_parent)
    except OSError as e:
        raise RunFailed(EXIT_BAD_INPUT, f"{side} run: {exe}: cannot run it: {e.strerror or e}")
    if r.returncode != 0 and not os.path.exists(path):
        last = (r.stderr.strip().splitlines() or [f"exited {r.returncode}"])[-1]
        raise RunFailed(r.returncode, f"{side} run: {last}")
    return path


def judge(paths, min_effect, confidence, load=results.load):
    """The merged pair of the rounds so far, {"baseline": doc, "current": doc}, and its paired
    comparison at `confidence` (a look's: look_confidence)."""
    merged = {side: merge(rounds, load) for side, rounds in paths.items()}
    return merged, compare.compare(merged["baseline"], merged["current"], min_effect, confidence, paired=True)


def sequential(next_round, judge_at, max_rounds, max_time, confidence, log=lambda line: None):
    """ddpbench-ab's stopping rule, over rounds run now or recorded earlier (the error-rate
    benchmark replays it): next_round(n) runs or reads round n and returns its seconds;
    judge_at(n, look_confidence) returns the comparison of rounds 0..n-1. Looks at looks(), or once
    --max-time has passed, and stops at the first look where every case is decided or one
    regressed, or at the time. Returns (comparison, rounds, each look's confidence)."""
    each = look_confidence(confidence, max_rounds)
    comparison, n, elapsed = None, 0, 0.0
    while n < max_rounds:
        elapsed += next_round(n)
        n += 1
        out_of_time = elapsed >= max_time
        if n not in looks(max_rounds) and not out_of_time:
            log(f"ddpbench-ab: round {n} done ({elapsed:.0f} s)")
            continue
        comparison = judge_at(n, each)
        undecided = len(comparison.inconclusive)
        log(f"ddpbench-ab: round {n} done ({elapsed:.0f} s): {len(comparison.cases) - undecided} of "
            f"{len(comparison.cases)} case(s) decided at {each * 100:.2f}%")
        if not undecided or comparison.regressed or out_of_time:
            break
    return comparison, n, each


def run(args, ddpbench_args, log):
    """Runs the rounds and returns (comparison, rounds run, per-look confidence)."""
    rounds_dir = os.path.join(args.out, "rounds")
    os.makedirs(rounds_dir, exist_ok=True)
    sides = {"baseline": (args.baseline_exe, ddpbench_args + args.baseline_arg),
             "current": (args.current_exe, ddpbench_args + args.current_arg)}
    paths = {"baseline": [], "current": []}  # per side, per round: the files of its runs
    each = strategies(args.baseline_exe, ddpbench_args)

    def next_round(n):
        # One strategy at a time, both sides back to back, so a case's pair is seconds apart, not a
        # whole run; which side goes first alternates from round to round for every strategy.
        started = time.monotonic()
        for side in paths:
            paths[side].append([])
        for j, strategy in enumerate(each):
            for side in (("baseline", "current") if (n + j) % 2 == 0 else ("current", "baseline")):
                exe, side_args = sides[side]
                path = os.path.join(rounds_dir, f"{side}-{n}-{strategy}.json")
                paths[side][-1].append(run_one(side, exe, with_strategy(side_args, strategy), path))
        return time.monotonic() - started

    def judge_at(n, confidence):
        merged, comparison = judge(paths, args.min_effect, confidence)
        for side, doc in merged.items():
            files.write_atomically(os.path.join(args.out, f"{side}.json"), json.dumps(doc, indent=1) + "\n")
        return comparison

    return sequential(next_round, judge_at, args.max_rounds, args.max_time, args.confidence, log)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, ddpbench_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = OneLineParser(prog="ddpbench-ab", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("baseline_exe", help="the ddpbench executable of the baseline")
    p.add_argument("current_exe", help="the ddpbench executable to judge (may be the same one, with --current-arg)")
    p.add_argument("--out", required=True, help="directory for the rounds' files and the merged pair (made if missing)")
    p.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS, help="rounds at most (default 20)")
    p.add_argument("--max-time", type=float, default=DEFAULT_MAX_TIME, help="seconds after which no new round starts (default 600)")
    p.add_argument("--min-effect", type=float, default=compare.DEFAULT_MIN_EFFECT,
                   help="smallest relative change in step time that counts (default 0.05 = 5%%)")
    p.add_argument("--confidence", type=float, default=compare.DEFAULT_CONFIDENCE,
                   help="confidence of the whole procedure, shared among its looks (default 0.95)")
    p.add_argument("--baseline-arg", action="append", default=[], metavar="ARG",
                   help="an argument for the baseline's runs only (repeatable; --baseline-arg=--flag=value)")
    p.add_argument("--current-arg", action="append", default=[], metavar="ARG",
                   help="an argument for the current side's runs only (repeatable)")
    p.add_argument("--allow-inconclusive", action="store_true",
                   help="exit 0 rather than 3 when some case is undecided and nothing regressed")
    p.add_argument("--markdown", action="store_true", help="print a markdown table")
    args = p.parse_args(ours)
    if not 2 <= args.max_rounds <= 1000:
        p.error(f"--max-rounds: {args.max_rounds} is not in [2, 1000] (an interval needs two rounds)")
    if not 0 < args.max_time:
        p.error(f"--max-time: {args.max_time!r} is not a positive number of seconds")
    if not 0 <= args.min_effect < 10:
        p.error(f"--min-effect: {args.min_effect!r} is not in [0, 10)")
    if not 0.5 <= args.confidence < 1:
        p.error(f"--confidence: {args.confidence!r} is not in [0.5, 1)")
    for exe in (args.baseline_exe, args.current_exe):
        if not (os.path.isfile(exe) and os.access(exe, os.X_OK)):
            p.error(f"{exe}: not an executable file")
    for a in ddpbench_args + args.baseline_arg + args.current_arg:
        if a.split("=")[0] in OWNED_FLAGS:
            p.error(f"{a.split('=')[0]}: ddpbench-ab sets it itself (one repetition a round, a file of its own)")
    if not any(a.split("=")[0] == "--parity-steps" for a in ddpbench_args):
        ddpbench_args = ddpbench_args + ["--parity-steps", "0"]  # parity is not what is compared
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as e:
        p.error(f"--out {args.out}: cannot make it: {e.strerror or e}")
    try:
        comparison, rounds, confidence = run(args, ddpbench_args, lambda line: print(line, file=sys.stderr, flush=True))
    except KeyboardInterrupt:  # the running ddpbench had the same SIGINT and stops too
        print(f"ddpbench-ab: interrupted; the rounds so far are in {args.out}/rounds", file=sys.stderr)
        return 130
    except RunFailed as e:
        print(f"ddpbench-ab: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT if e.code == EXIT_BAD_INPUT else e.code or 1
    except results.ResultsError as e:
        print(f"ddpbench-ab: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(compare.format_table(comparison, markdown=args.markdown, min_effect=args.min_effect))
    print(f"paired over {rounds} interleaved rounds; this look had {confidence * 100:.2f}% of the confidence, "
          f"{args.confidence * 100:g}% over all {len(looks(args.max_rounds))} looks; files in {args.out}")
    return comparison.exit_code(args.allow_inconclusive)
