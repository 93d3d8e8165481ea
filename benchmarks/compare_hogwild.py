#!/usr/bin/python3
"""ddpbench `hogwild` against the seed's recipe in PyTorch's Python API (model.share_memory() and
torch.multiprocessing workers: benchmarks/python_hogwild.py) on `mlp`, 2 workers, one thread each,
the same batch per worker. Both run Debian's LibTorch 1.13 kernels, so the ratio measures how each
runs the workers around them. Rounds are interleaved (benchmarks/interleave.py), every run in fresh
processes. ddpbench's figure is the mean step time over its measured steps (a step: one update by
every worker); the peer's is its measured window over the steps.

In the same rounds: ddpbench's threads mode (threads vs processes) and --sync-every 4, and with
--before DIR another build's processes mode (an earlier commit's ddpbench in DIR), to measure a
change against what it replaced in the same run.

    benchmarks/compare_hogwild.py [--rounds 5] [--steps 30] [--warmup 5] [--batch 128] [--before DIR]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_mlp_step_ms, parser, report, run_rounds, tool_step_ms  # noqa: E402


def run_ddpbench(args, extra, build=None):
    if build is not None:
        args = argparse.Namespace(**{**vars(args), "build": build})
    return ddpbench_mlp_step_ms(args, "hogwild", world=2, threads=1, extra=extra)


def run_pytorch(args):
    return tool_step_ms(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_hogwild.py"),
                         str(args.steps), str(args.warmup), str(args.batch), "1", "2"])


def main():
    p = parser(__doc__, rounds=5, steps=30, batch=128)
    p.add_argument("--before", metavar="DIR", help="another ddpbench build to run beside this one (processes mode)")
    args = p.parse_args()
    if args.before and not os.access(os.path.join(args.before, "ddpbench"), os.X_OK):
        p.error(f"--before: no ddpbench executable in {args.before}")

    tools = {
        "ddpbench hogwild processes": lambda: run_ddpbench(args, ["--hogwild-mode", "processes"]),
        "PyTorch share_memory + torch.multiprocessing": lambda: run_pytorch(args),
        "ddpbench hogwild threads": lambda: run_ddpbench(args, ["--hogwild-mode", "threads"]),
        "ddpbench hogwild processes --sync-every 4": lambda: run_ddpbench(args, ["--hogwild-mode", "processes",
                                                                                 "--sync-every", "4"]),
    }
    if args.before:
        tools[f"ddpbench hogwild processes, {args.before}"] = lambda: run_ddpbench(
            args, ["--hogwild-mode", "processes"], build=args.before)
    samples = run_rounds(tools, args.rounds)
    report(args, samples, f"mlp, 2 Hogwild workers, global batch {args.batch} ({args.batch // 2} per worker), "
           f"1 thread per worker, {args.steps} steps after {args.warmup} warm-up, {args.rounds} interleaved rounds",
           "ddpbench hogwild processes", label="run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
