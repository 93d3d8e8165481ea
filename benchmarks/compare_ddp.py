#!/usr/bin/python3
"""ddpbench `ddp` against PyTorch's own DistributedDataParallel on `mlp`, world 2, Gloo, one
thread per rank, the same per-rank batch (benchmarks/python_ddp_loop.py is the peer). Both run
Debian's LibTorch 1.13 kernels and the same Gloo, so the ratio measures how each schedules the
gradient all-reduce. Rounds are interleaved (benchmarks/interleave.py); each run is a fresh set of
rank processes, and the figure per run is rank 0's mean step time over the measured steps.

Also measured, in the same rounds: ddpbench with --grad-as-bucket-view, with --no-overlap (the
worth of overlapping), and a --bucket-mb sweep.

    benchmarks/compare_ddp.py [--rounds 5] [--steps 30] [--warmup 5] [--batch 128] [--sweep 1,4,25]
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_mlp_step_ms, parser, report, run_rounds, tool_step_ms  # noqa: E402


def run_ddpbench(args, extra):
    return ddpbench_mlp_step_ms(args, "ddp", world=2, threads=1, extra=extra)


def run_pytorch(args, bucket_mb):
    return tool_step_ms(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_ddp_loop.py"),
                         str(args.steps), str(args.warmup), str(args.batch), "1", "2", str(bucket_mb)])


def main():
    p = parser(__doc__, rounds=5, steps=30, batch=128)
    p.add_argument("--sweep", default="1,4,25", help="--bucket-mb values for ddpbench (MiB)")
    args = p.parse_args()

    tools = {
        "ddpbench ddp": lambda: run_ddpbench(args, []),
        "PyTorch DDP": lambda: run_pytorch(args, 25),
        "ddpbench ddp --grad-as-bucket-view": lambda: run_ddpbench(args, ["--grad-as-bucket-view"]),
        "ddpbench ddp --no-overlap": lambda: run_ddpbench(args, ["--no-overlap"]),
    }
    for mb in [m for m in args.sweep.split(",") if m and float(m) != 25]:
        tools[f"ddpbench ddp --bucket-mb {mb}"] = lambda mb=mb: run_ddpbench(args, ["--bucket-mb", mb])
    samples = run_rounds(tools, args.rounds)
    report(args, samples, f"mlp, world 2 (Gloo), global batch {args.batch}, 1 thread per rank, {args.steps} steps "
           f"after {args.warmup} warm-up, {args.rounds} interleaved rounds", "ddpbench ddp", label="run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
