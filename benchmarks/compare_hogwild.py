#!/usr/bin/python3
"""ddpbench `hogwild` against the seed's recipe in PyTorch's Python API (model.share_memory() and
torch.multiprocessing workers: benchmarks/python_hogwild.py) on `mlp`, 2 workers, one thread each,
the same batch per worker. Both run Debian's LibTorch 1.13 kernels, so the ratio measures how each
runs the workers around them. Rounds are interleaved (benchmarks/interleave.py), every run in fresh
processes. ddpbench's figure is the mean step time over its measured steps (a step: one update by
every worker); the peer's is its measured window over the steps.

In the same rounds: ddpbench's threads mode (threads vs processes) and --sync-every 4.

    benchmarks/compare_hogwild.py [--rounds 5] [--steps 30] [--warmup 5] [--batch 128]
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_mlp_step_ms, parser, report, run_rounds, tool_step_ms  # noqa: E402


def run_ddpbench(args, extra):
    return ddpbench_mlp_step_ms(args, "hogwild", world=2, threads=1, extra=extra)


def run_pytorch(args):
    return tool_step_ms(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_hogwild.py"),
                         str(args.steps), str(args.warmup), str(args.batch), "1", "2"])


def main():
    p = parser(__doc__, rounds=5, steps=30, batch=128)
    args = p.parse_args()

    tools = {
        "ddpbench hogwild processes": lambda: run_ddpbench(args, ["--hogwild-mode", "processes"]),
        "PyTorch share_memory + torch.multiprocessing": lambda: run_pytorch(args),
        "ddpbench hogwild threads": lambda: run_ddpbench(args, ["--hogwild-mode", "threads"]),
        "ddpbench hogwild processes --sync-every 4": lambda: run_ddpbench(args, ["--hogwild-mode", "processes",
                                                                                 "--sync-every", "4"]),
    }
    samples = run_rounds(tools, args.rounds)
    report(args, samples, f"mlp, 2 Hogwild workers, global batch {args.batch} ({args.batch // 2} per worker), "
           f"1 thread per worker, {args.steps} steps after {args.warmup} warm-up, {args.rounds} interleaved rounds",
           "ddpbench hogwild processes", label="run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
