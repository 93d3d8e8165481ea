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

It judges only what this invocation measured: the files an earlier ddpbench-ab left in DIR are
removed first, and a run counts only with the results file it wrote itself. A run that fails (it
crashes, is killed, exits without complete results, or has none by --max-time) ends the comparison
with one line naming the side and nothing judged. --max-time bounds the whole invocation: a run
starts only where twice its side's slowest earlier run of that strategy fits before it (else the
round is left unfinished and the complete rounds are judged), and a run still going at --max-time
is stopped, with every process it started, and counts as hung.

It writes DIR/rounds/ (every run's own results file, SIDE-ROUND-STRATEGY.json), DIR/baseline.json and DIR/current.json (each
side's rounds as repetitions, which ddpbench-compare --paired reads again) and prints
ddpbench-compare's table. Exit codes: ddpbench-compare's 0 no regression, every case decided;
1 a regression; 2 bad input (its own, or a ddpbench run refused its arguments); 3 no regression,
some case still undecided; and 4 a run failed (crashed, killed, hung, or left no complete
results): nothing was judged.
"""
import argparse
import copy
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time

from . import compare, files, results
from .args import EXIT_BAD_INPUT, OneLineParser

LOOKS = (5, 10, 20, 40)
DEFAULT_MAX_ROUNDS, DEFAULT_MAX_TIME = 20, 600
# A side's run failed: crashed, killed, hung, or left no complete results. Nothing is judged.
EXIT_RUN_FAILED = 4
# A run starts only where this many times its side's slowest earlier run (of that strategy) fits
# before --max-time: the round would not finish in time otherwise, and a run still going at
# --max-time is taken for hung.
FIT_FACTOR = 2
# After SIGTERM, the seconds a stopped run has to end (ddpbench ends within 2 s) before SIGKILL.
STOP_GRACE_SECONDS = 5
ROUND_FILE = re.compile(r"^(baseline|current)-[0-9]+-[A-Za-z0-9_.-]+\.json$")
# Flags the rounds set themselves: one repetition, fixed, into a file of the round's own.
OWNED_FLAGS = ("--repetitions", "--target-precision", "--min-time", "--max-time", "--json", "--no-json")


class RunFailed(Exception):
    """A ddpbench run failed: the exit code ddpbench-ab ends with (EXIT_BAD_INPUT where the run
    refused its arguments, else EXIT_RUN_FAILED) and one line saying why."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code = code


class OutOfTime(Exception):
    """The round cannot finish before --max-time: its next run would not fit."""


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
        listing = subprocess.run([exe, "--list"], capture_output=True, text=True, check=True, timeout=60).stdout
    except subprocess.TimeoutExpired:
        raise RunFailed(EXIT_RUN_FAILED, f"{exe} --list: no answer within 60 s")
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


def _stop_group(proc, grace=STOP_GRACE_SECONDS):
    """Ends a run and every process it started (it leads a session of its own): SIGTERM, which
    ddpbench answers within 2 s taking its ranks along, then SIGKILL after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    proc.communicate()  # the pipe closes once every process of the group is gone


def _last_line(stderr, fallback):
    lines = [line for line in (stderr or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else fallback


def run_one(who, exe, args, path, limit):
    """One repetition of every case into `path`, within `limit` seconds; returns its seconds.
    `who` names the run in messages ("current run of ddp, round 3"). The run counts only with the
    results it wrote itself: `path` is removed first. A run that fails a case still counts (its
    results file says so, and the comparison calls the case failed); anything else that is not a
    clean run raises RunFailed."""
    if os.path.lexists(path):
        os.unlink(path)
    cmd = [exe, "--repetitions", "1", "--json", path, *args]
    started = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                errors="replace", preexec_fn=_die_with_parent, start_new_session=True)
    except OSError as e:
        raise RunFailed(EXIT_BAD_INPUT, f"{who}: {exe}: cannot run it: {e.strerror or e}")
    try:
        _, stderr = proc.communicate(timeout=max(limit, 0.001))
    except subprocess.TimeoutExpired:
        _stop_group(proc)
        raise RunFailed(EXIT_RUN_FAILED, f"{who}: no results after {time.monotonic() - started:.0f} s, "
                                         f"at --max-time: it hangs, or is slower than --max-time allows")
    except BaseException:  # interrupted: the run goes with ddpbench-ab
        _stop_group(proc, grace=0)
        raise
    code = proc.returncode
    if code < 0:
        raise RunFailed(EXIT_RUN_FAILED, f"{who}: killed by {signal.Signals(-code).name}")
    if code == EXIT_BAD_INPUT:
        raise RunFailed(EXIT_BAD_INPUT, f"{who}: {_last_line(stderr, 'refused its arguments (exit 2)')}")
    if code not in (0, 1):
        raise RunFailed(EXIT_RUN_FAILED, f"{who}: exit {code}: {_last_line(stderr, 'no message')}")
    if not os.path.isfile(path):
        raise RunFailed(EXIT_RUN_FAILED, f"{who}: exit {code} without writing its results"
                                         f"{': ' + _last_line(stderr, '') if _last_line(stderr, '') else ''}")
    try:
        complete = results.is_complete(results.load(path))
    except results.ResultsError as e:
        raise RunFailed(EXIT_RUN_FAILED, f"{who}: its results are unusable: {e}")
    if not complete:
        raise RunFailed(EXIT_RUN_FAILED, f"{who}: exit {code}, its results incomplete: "
                                         f"{_last_line(stderr, 'the run ended early')}")
    return time.monotonic() - started


def remove_earlier_outputs(out):
    """The files an earlier ddpbench-ab left in `out` (its rounds and its merged pair), so that
    nothing of them is read, or read by a person, as this invocation's. Returns how many."""
    removed = 0
    rounds_dir = os.path.join(out, "rounds")
    names = [os.path.join("rounds", n) for n in os.listdir(rounds_dir) if ROUND_FILE.match(n)] \
        if os.path.isdir(rounds_dir) else []
    for name in names + ["baseline.json", "current.json"]:
        path = os.path.join(out, name)
        if os.path.isfile(path) or os.path.islink(path):
            os.unlink(path)
            removed += 1
    return removed


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
        try:
            elapsed += next_round(n)
        except OutOfTime:  # round n+1 would not finish in time: the complete rounds are judged
            log(f"ddpbench-ab: round {n + 1} left unfinished: its next run would not end before --max-time")
            comparison = judge_at(n, each)
            break
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
    deadline = time.monotonic() + args.max_time
    rounds_dir = os.path.join(args.out, "rounds")
    os.makedirs(rounds_dir, exist_ok=True)
    removed = remove_earlier_outputs(args.out)
    if removed:
        log(f"ddpbench-ab: removed {removed} file(s) an earlier ddpbench-ab left in {args.out}")
    sides = {"baseline": (args.baseline_exe, ddpbench_args + args.baseline_arg),
             "current": (args.current_exe, ddpbench_args + args.current_arg)}
    paths = {"baseline": [], "current": []}  # per side, per round: the files of its runs
    slowest = {}  # (side, strategy): the longest of its runs so far, in seconds
    each = strategies(args.baseline_exe, ddpbench_args)

    def next_round(n):
        # One strategy at a time, both sides back to back, so a case's pair is seconds apart, not a
        # whole run; which side goes first alternates from round to round for every strategy.
        started = time.monotonic()
        for side in paths:
            paths[side].append([])
        for j, strategy in enumerate(each):
            for side in (("baseline", "current") if (n + j) % 2 == 0 else ("current", "baseline")):
                left = deadline - time.monotonic()
                if (side, strategy) in slowest and FIT_FACTOR * slowest[(side, strategy)] > left:
                    for s in paths:
                        paths[s].pop()
                    raise OutOfTime()
                exe, side_args = sides[side]
                path = os.path.join(rounds_dir, f"{side}-{n}-{strategy}.json")
                seconds = run_one(f"{side} run of {strategy}, round {n + 1}", exe,
                                  with_strategy(side_args, strategy), path, left)
                slowest[(side, strategy)] = max(seconds, slowest.get((side, strategy), 0.0))
                paths[side][-1].append(path)
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
    p.add_argument("--out", required=True, help="directory for the rounds' files and the merged pair (made if missing; "
                                                "the files an earlier ddpbench-ab left there are removed first)")
    p.add_argument("--max-rounds", type=int, default=DEFAULT_MAX_ROUNDS, help="rounds at most (default 20)")
    p.add_argument("--max-time", type=float, default=DEFAULT_MAX_TIME,
                   help="seconds the comparison may take (default 600): a run starts only if twice its slowest "
                        "earlier run fits, and a run still going then counts as hung (exit 4)")
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
        print(f"ddpbench-ab: {e}; nothing was judged", file=sys.stderr)
        return e.code
    except OSError as e:  # --out's files: a rounds file that cannot be removed, a full disk
        print(f"ddpbench-ab: --out {args.out}: {e.strerror or e}: {e.filename or ''}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except results.ResultsError as e:
        print(f"ddpbench-ab: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(compare.format_table(comparison, markdown=args.markdown, min_effect=args.min_effect))
    print(f"paired over {rounds} interleaved rounds; this look had {confidence * 100:.2f}% of the confidence, "
          f"{args.confidence * 100:g}% over all {len(looks(args.max_rounds))} looks; files in {args.out}")
    return comparison.exit_code(args.allow_inconclusive)
