"""ddpbench-levers: the memory levers swept, side by side, with the trade-off drawn and said.

    ddpbench-levers --out DIR [--activation-checkpointing none,full] [--grad-accum 1,4]
                    [--rounds 3] [--ddpbench EXE] [--max-time S] -- DDPBENCH_ARGS...

Runs every setting of the grid (each --activation-checkpointing policy with each --grad-accum K)
on the same cases (DDPBENCH_ARGS: workloads, strategies, world, batch...), in interleaved rounds:
each round runs every setting once (one repetition each, in an order that turns round to round), so
the settings of a case see the same stretches of the machine, and each setting's rounds are its
repetitions. It writes DIR/<setting>.json per setting (ddpbench's results, the rounds merged),
DIR/report/ (ddpbench-report over them: the chart of peak memory per device against throughput, a
point per setting) and prints one "why" line per case and setting against the same case without
levers (reports/levers.py): what the lever cut, and at what throughput, or "cannot tell".

Bad input (a flag of its own, every:0, or a lever flag given to ddpbench after --) is one line and
exit 2 before anything runs; a setting ddpbench refuses (a K that does not divide the batch) ends
the sweep with ddpbench's line and exit 2; a run that crashes, hangs past --max-time or leaves no
complete results ends it with exit 4 and one line naming the run. A sweep that ends early leaves no
file of its own in DIR; the files of an earlier sweep there are removed first, so nothing is
mistaken for this sweep's.
"""
import argparse
import json
import os
import re
import sys
import time

from . import files, levers
from .ab import OWNED_FLAGS, RunFailed, merge, run_one
from .args import EXIT_BAD_INPUT, OneLineParser

LEVER_FLAGS = ("--activation-checkpointing", "--grad-accum")
POLICY = re.compile(r"^(none|full|every:[1-9][0-9]*)$")
SETTING_FILE = re.compile(r"^(ac-[a-z0-9]+_accum-[0-9]+)(-round-[0-9]+)?\.json$")
DEFAULT_MAX_TIME = 1800


def setting_name(policy, k):
    """The file name of a setting: ac-full_accum-4 (every:2 is written every2)."""
    return f"ac-{policy.replace(':', '')}_accum-{k}"


def parse_grid(policies, ks):
    """[(policy, K)] of the grid, or UsageError-like ValueError naming the flag."""
    ps = [p.strip() for p in policies.split(",") if p.strip()]
    if not ps or any(not POLICY.match(p) for p in ps):
        raise ValueError(f"--activation-checkpointing: {policies!r} is not a comma list of none, full, every:N (N >= 1)")
    try:
        kv = [int(k) for k in ks.split(",") if k.strip()]
    except ValueError:
        kv = []
    if not kv or any(k < 1 for k in kv):
        raise ValueError(f"--grad-accum: {ks!r} is not a comma list of whole numbers of at least 1")
    grid = [(p, k) for p in dict.fromkeys(ps) for k in dict.fromkeys(kv)]
    if len(grid) < 2:
        raise ValueError("--activation-checkpointing, --grad-accum: the grid has one setting; a sweep needs two or more")
    return grid


def check_passed_flags(ddpbench_args):
    """The flags the sweep sets itself must not come after --: one line naming the first found."""
    for a in ddpbench_args:
        name = a.split("=", 1)[0]
        if name in LEVER_FLAGS:
            raise ValueError(f"{name}: give it to ddpbench-levers (before --), which sweeps it")
        if name in OWNED_FLAGS:
            raise ValueError(f"{name}: ddpbench-levers sets it (one repetition a round, into a file of its own)")


def remove_earlier_outputs(out):
    """A sweep's files in `out` (each setting's, each round's); how many were removed."""
    removed = 0
    for name in os.listdir(out):
        if SETTING_FILE.match(name):
            os.unlink(os.path.join(out, name))
            removed += 1
    return removed


def run_rounds(args, grid, ddpbench_args, rounds, names, deadline, log):
    """Every setting once a round, for --rounds rounds; each run's file appended to rounds[name]."""
    for n in range(args.rounds):
        # The order turns from round to round, so no setting always runs first (or last) in a round.
        for i in range(len(names)):
            name = names[(n + i) % len(names)]
            policy, k = grid[names.index(name)]
            path = os.path.join(args.out, f"{name}-round-{n + 1}.json")
            seconds = run_one(f"{name}, round {n + 1}", args.ddpbench,
                              ddpbench_args + ["--activation-checkpointing", policy, "--grad-accum", str(k)],
                              path, deadline - time.monotonic())
            rounds[name].append([path])
            log(f"ddpbench-levers: round {n + 1}/{args.rounds}: {name} in {seconds:.1f} s")


def sweep(args, grid, ddpbench_args, log):
    """Runs the rounds; returns {setting name: merged results path}."""
    deadline = time.monotonic() + args.max_time
    rounds = {setting_name(p, k): [] for p, k in grid}
    names = list(rounds)
    try:
        run_rounds(args, grid, ddpbench_args, rounds, names, deadline, log)
    except BaseException:  # nothing half-written: the rounds of a sweep that did not finish go
        remove_earlier_outputs(args.out)
        raise
    merged = {}
    sweep_id = f"{os.path.abspath(args.out)} {time.strftime('%Y-%m-%dT%H:%M:%S')}"
    for name, paths in rounds.items():
        doc = merge(paths)
        doc["context"]["ddpbench_levers"] = {"sweep": sweep_id, "setting": name}
        path = os.path.join(args.out, f"{name}.json")
        files.write_atomically(path, json.dumps(doc, indent=1) + "\n")
        for (p,) in paths:
            os.unlink(p)
        merged[name] = path
    return merged


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    ours, ddpbench_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = OneLineParser(prog="ddpbench-levers", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="directory for each setting's results and the report (made if missing)")
    p.add_argument("--activation-checkpointing", default="none,full", help="comma list of policies (default none,full)")
    p.add_argument("--grad-accum", default="1,4", help="comma list of micro-batch counts (default 1,4)")
    p.add_argument("--rounds", type=int, default=3, help="rounds: each setting's repetitions (default 3; 2 or more "
                   "for a throughput verdict)")
    p.add_argument("--ddpbench", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                                       "build", "ddpbench"), help="the ddpbench executable (default build/ddpbench)")
    p.add_argument("--max-time", type=float, default=DEFAULT_MAX_TIME,
                   help="seconds the sweep may take (default 1800); a run still going then counts as hung (exit 4)")
    args = p.parse_args(ours)
    log = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    try:
        if args.rounds < 1:
            raise ValueError(f"--rounds: {args.rounds} runs nothing; give 1 or more")
        grid = parse_grid(args.activation_checkpointing, args.grad_accum)
        check_passed_flags(ddpbench_args)
        if os.path.exists(args.out) and not os.path.isdir(args.out):
            raise ValueError(f"--out {args.out}: is a file, not a directory")
    except ValueError as e:
        print(f"ddpbench-levers: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from .report import write_report  # matplotlib only once the arguments hold
    try:
        os.makedirs(args.out, exist_ok=True)
        removed = remove_earlier_outputs(args.out)
        if removed:
            log(f"ddpbench-levers: removed {removed} file(s) an earlier sweep left in {args.out}")
        merged = sweep(args, grid, ddpbench_args, log)
        index, _ = write_report(list(merged.values()), os.path.join(args.out, "report"))
    except RunFailed as e:
        print(f"ddpbench-levers: {e}", file=sys.stderr)
        return e.code
    except OSError as e:
        print(f"ddpbench-levers: --out {args.out}: {e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    from .cases import collect_cases
    from .results import load
    lines = levers.why_lines(collect_cases([(os.path.basename(p), load(p)) for p in merged.values()]))
    for line in lines or ["no case ran under two settings: nothing to compare (see the cases' reasons in the report)"]:
        print(line)
    print(f"ddpbench-levers: {len(merged)} settings in {args.out}, the report in {index}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
