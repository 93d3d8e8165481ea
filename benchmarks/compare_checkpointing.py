#!/usr/bin/env python3
"""ddpbench's --activation-checkpointing full against PyTorch's torch.utils.checkpoint (non-reentrant)
on the same units, the same model and the same machine: `single` on one device, each side also run
without checkpointing, so each side's own cost of recomputing is read beside the ratio.

The peer is benchmarks/python_train_loop.py --activation-checkpointing full: mlp's layers,
transformer's encoder layers and gpt2's blocks each through torch.utils.checkpoint, as ddpbench's
wrap units are checkpointed. Rounds are interleaved, the order rotating each round; each run is a
fresh process and gives its mean step time and its peak bytes (ddpbench: device 0's
peak_allocated_bytes; the peer: one more step's peak over what it holds, counted by
benchmarks/heap_counter.c under LD_PRELOAD: benchmarks/heap_peak.py). Ratios are ddpbench's
throughput over the peer's (above 1: ddpbench faster) and the peer's peak over ddpbench's (above 1:
ddpbench lower).

    benchmarks/compare_checkpointing.py [--workloads mlp,transformer,gpt2] [--rounds 5] [--steps 20]
                                        [--warmup 5] [--threads 2] [--build build] [--python /usr/bin/python3]
                                        [--seq-len 32] [--batch N] [--json F]

gpt2 is GPT-2 small (124M) on both sides.
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import (ddpbench_case, parser, peer_environment_counting_heap, report,  # noqa: E402
                                   run_rounds)


def main():
    p = parser(__doc__, rounds=5, steps=20, batch=0)
    p.add_argument("--workloads", default="mlp,transformer,gpt2")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter whose torch is the peer")
    p.add_argument("--seq-len", type=int, default=32)
    args = p.parse_args()
    heap_dir = tempfile.TemporaryDirectory()
    env, counter = peer_environment_counting_heap(heap_dir.name)
    if not counter:
        print("compare_checkpointing: no C compiler (cc) for benchmarks/heap_counter.c: the peer's peak is no exact peak",
              file=sys.stderr)
    ratios, everything = {}, {}
    for workload in args.workloads.split(","):
        common = ["--workload", workload, "--device", "cpu", "--threads", str(args.threads),
                  "--steps", str(args.steps), "--warmup", str(args.warmup)]
        if args.batch:
            common += ["--batch", str(args.batch)]
        if workload == "gpt2":
            common += ["--seq-len", str(args.seq_len)]
        peaks = {}

        def ddpbench(name, policy):
            def run():
                c = ddpbench_case(args.build, ["--strategy", "single", "--activation-checkpointing", policy] + common)
                peaks.setdefault(name, []).append(c["memory"][0]["peak_allocated_bytes"])
                return statistics.fmean(c["step_times_ms"])
            return run

        def peer(name, policy):
            def run():
                out = subprocess.run([args.python, os.path.join(ROOT, "benchmarks", "python_train_loop.py"), "--peak",
                                      "--activation-checkpointing", policy] + common,
                                     check=True, capture_output=True, text=True, env=env).stdout
                figures = json.loads(out.strip().splitlines()[-1])
                peaks.setdefault(name, []).append(figures["peak_bytes"])
                return statistics.fmean(figures["step_ms"])
            return run

        tools = {"ddpbench full": ddpbench("ddpbench full", "full"), "PyTorch checkpoint": peer("PyTorch checkpoint", "full"),
                 "ddpbench none": ddpbench("ddpbench none", "none"), "PyTorch none": peer("PyTorch none", "none")}
        samples = run_rounds(tools, args.rounds)
        med = report(argparse_free(args), samples, f"{workload} single on cpu, {args.threads} threads, {args.steps} steps "
                     f"after {args.warmup} warm-up, {args.rounds} interleaved rounds", "ddpbench full")
        peak = {n: statistics.median(v) for n, v in peaks.items()}
        print("| run | peak, MiB (median) |")
        print("|---|---|")
        for n, v in peak.items():
            print(f"| {n} | {v / 2**20:.2f} |")
        ratios[workload] = {"throughput full": med["PyTorch checkpoint"] / med["ddpbench full"],
                            "throughput none": med["PyTorch none"] / med["ddpbench none"],
                            "peak full (peer / ddpbench)": peak["PyTorch checkpoint"] / peak["ddpbench full"],
                            "ddpbench cost of full": med["ddpbench full"] / med["ddpbench none"],
                            "PyTorch cost of full": med["PyTorch checkpoint"] / med["PyTorch none"]}
        everything[workload] = {"step_ms": samples, "peak_bytes": peaks}
        print()
    print("| workload | ddpbench full / torch.utils.checkpoint (throughput) | peer's peak / ddpbench's | "
          "ddpbench full / none (step) | PyTorch full / none (step) | without checkpointing (throughput) |")
    print("|---|---|---|---|---|---|")
    for w, r in ratios.items():
        print(f"| {w} | {r['throughput full']:.3f}x | {r['peak full (peer / ddpbench)']:.3f}x | "
              f"{r['ddpbench cost of full']:.3f}x | {r['PyTorch cost of full']:.3f}x | {r['throughput none']:.3f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "runs": everything, "ratios": ratios}, f, indent=2)
    return 0


def argparse_free(args):
    """args without --json: report() would write each workload's file over the last one's."""
    import argparse
    return argparse.Namespace(**dict(vars(args), json=None))


if __name__ == "__main__":
    sys.exit(main())
