#!/usr/bin/python3
"""ddpbench `single` against (a) a bare LibTorch loop and (b) PyTorch's Python API, on `mlp`.

All three run the same kernels (Debian's LibTorch 1.13 under both C++ and Python), so a ratio below
1.0 against the bare loop is overhead the harness added. Rounds are interleaved, the order rotating
each round, so drift of the machine hits all three alike. Each round runs each tool once in a fresh
process and takes its mean step time over the measured steps; the report gives the median over
rounds and throughput ratios (higher is better for ddpbench).

    benchmarks/compare_single.py [--rounds 7] [--steps 40] [--warmup 5] [--batch 128] [--threads 1]
"""
import argparse
import json
import os
import platform
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_step_ms, print_table, run_rounds, tool_step_ms  # noqa: E402


def run_ddpbench(args, build):
    return ddpbench_step_ms(build, ["--strategy", "single", "--workload", "mlp", "--device", "cpu", "--world-size", "1",
                                    "--threads", str(args.threads), "--batch", str(args.batch),
                                    "--steps", str(args.steps), "--warmup", str(args.warmup)])


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--json", help="also write the measurements here")
    args = p.parse_args()

    loop_args = [str(args.steps), str(args.warmup), str(args.batch), str(args.threads)]
    tools = {
        "ddpbench single": lambda: run_ddpbench(args, args.build),
        "bare LibTorch loop": lambda: tool_step_ms([os.path.join(args.build, "benchmarks", "bare_single_loop")]
                                                       + loop_args),
        "PyTorch Python loop": lambda: tool_step_ms(["/usr/bin/python3",
                                                         os.path.join(ROOT, "benchmarks", "python_single_loop.py")]
                                                        + loop_args),
    }
    samples = run_rounds(tools, args.rounds)
    print(f"mlp, batch {args.batch}, {args.threads} thread(s), {args.steps} steps after {args.warmup} warm-up, "
          f"{args.rounds} interleaved rounds; {platform.node()}, {os.cpu_count()} CPUs")
    med = print_table(samples, "ddpbench single")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "step_ms": samples, "median_step_ms": med}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
