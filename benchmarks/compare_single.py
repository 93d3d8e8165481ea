#!/usr/bin/python3
"""ddpbench `single` against (a) a bare LibTorch loop and (b) PyTorch's Python API, on `mlp`.

All three run the same kernels (Debian's LibTorch 1.13 under both C++ and Python), so a ratio below
1.0 against the bare loop is overhead the harness added. Rounds are interleaved, the order rotating
each round, so drift of the machine hits all three alike. Each round runs each tool once in a fresh
process and takes its mean step time over the measured steps; the report gives the median over
rounds and throughput ratios (higher is better for ddpbench).

    benchmarks/compare_single.py [--rounds 7] [--steps 40] [--warmup 5] [--batch 128] [--threads 1]
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_mlp_step_ms, parser, report, run_rounds, tool_step_ms  # noqa: E402


def main():
    p = parser(__doc__, rounds=7, steps=40, batch=128)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()

    loop_args = [str(args.steps), str(args.warmup), str(args.batch), str(args.threads)]
    tools = {
        "ddpbench single": lambda: ddpbench_mlp_step_ms(args, "single", world=1, threads=args.threads),
        "bare LibTorch loop": lambda: tool_step_ms([os.path.join(args.build, "benchmarks", "bare_single_loop")]
                                                       + loop_args),
        "PyTorch Python loop": lambda: tool_step_ms(["/usr/bin/python3",
                                                         os.path.join(ROOT, "benchmarks", "python_single_loop.py")]
                                                        + loop_args),
    }
    samples = run_rounds(tools, args.rounds)
    report(args, samples, f"mlp, batch {args.batch}, {args.threads} thread(s), {args.steps} steps after "
           f"{args.warmup} warm-up, {args.rounds} interleaved rounds", "ddpbench single")
    return 0


if __name__ == "__main__":
    sys.exit(main())
