#!/usr/bin/python3
"""ddpbench `zero1` (and `zero2`) against PyTorch's ZeroRedundancyOptimizer under DDP on `mlp`, Gloo,
one thread per rank, the same per-rank batch (benchmarks/python_ddp_loop.py with `zero` is the peer).
Both run the same machine's LibTorch kernels and Gloo, so the ratio measures how each moves the
gradients and the parameters: PyTorch all-reduces every gradient (DDP) and broadcasts each rank's
updated share; ddpbench reduce-scatters buckets during backward and all-gathers after the step.
Rounds are interleaved (benchmarks/interleave.py); each run is a fresh set of rank processes, and
the figure per run is rank 0's mean step time over the measured steps. ddpbench's `ddp` and PyTorch's
plain DDP run in the same rounds, for reference.

    benchmarks/compare_zero.py [--rounds 5] [--steps 30] [--warmup 5] [--batch 128] [--world 2]
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_mlp_step_ms, parser, report, run_rounds, tool_step_ms  # noqa: E402


def run_pytorch(args, optimizer):
    return tool_step_ms(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_ddp_loop.py"),
                         str(args.steps), str(args.warmup), str(args.batch), "1", str(args.world), "25", optimizer])


def main():
    p = parser(__doc__, rounds=5, steps=30, batch=128)
    p.add_argument("--world", type=int, default=2, help="ranks (one thread each)")
    args = p.parse_args()
    tools = {
        "ddpbench zero1": lambda: ddpbench_mlp_step_ms(args, "zero1", world=args.world, threads=1),
        "PyTorch DDP + ZeroRedundancyOptimizer": lambda: run_pytorch(args, "zero"),
        "ddpbench zero2": lambda: ddpbench_mlp_step_ms(args, "zero2", world=args.world, threads=1),
        "ddpbench ddp": lambda: ddpbench_mlp_step_ms(args, "ddp", world=args.world, threads=1),
        "PyTorch DDP": lambda: run_pytorch(args, "sgd"),
    }
    samples = run_rounds(tools, args.rounds)
    report(args, samples, f"mlp, world {args.world} (Gloo), global batch {args.batch}, 1 thread per rank, "
           f"{args.steps} steps after {args.warmup} warm-up, {args.rounds} interleaved rounds", "ddpbench zero1",
           label="run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
