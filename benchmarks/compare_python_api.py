#!/usr/bin/env python3
"""ddpbench against PyTorch's Python API on the same machine and torch: `single` and `ddp` with one
rank against the same training loop in Python, plain and under DistributedDataParallel
(benchmarks/python_train_loop.py), on `mlp`, `transformer` and `gpt2`.

On the GPU machine both sides use the wheel's LibTorch (ddpbench built by scripts/build-gpu.sh), so
the ratio is what ddpbench's harness and its own DDP cost or save against PyTorch's. Rounds are
interleaved, the order rotating each round; each round runs each tool once in a fresh process and
takes its mean step time. Ratios are throughputs, ddpbench's over Python's (above 1: ddpbench faster).

    benchmarks/compare_python_api.py [--workloads mlp,transformer,gpt2] [--device cuda] [--dtype bf16]
                                     [--rounds 5] [--steps 50] [--warmup 10] [--build build-gpu]
                                     [--seq-len N] [--gpt2-loss default|plain|fused]

gpt2's loss: by default each side takes its own (ddpbench's fused output projection and loss over
chunks of tokens, PyTorch's loop the whole logits, as nanoGPT's eager loop); `--gpt2-loss plain` or
`fused` runs the same path on both sides (python_train_loop.py ports ddpbench's fused loss), so the
ratio is the harness's alone.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import ddpbench_step_ms, parser, report, run_rounds, tool_step_ms  # noqa: E402


def main():
    p = parser(__doc__, rounds=5, steps=50, batch=0)
    p.add_argument("--workloads", default="mlp,transformer")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads on CPU (default: each tool's own)")
    p.add_argument("--python", default=sys.executable, help="the interpreter whose torch is the peer")
    p.add_argument("--seq-len", type=int, default=0, help="gpt2: tokens a sample (default: each tool's)")
    p.add_argument("--gpt2-loss", choices=["default", "plain", "fused"], default="default",
                   help="gpt2: each side's own loss path, or this one on both sides")
    args = p.parse_args()

    ratios, measured = {}, {}
    per_workload = argparse.Namespace(**dict(vars(args), json=None))  # one --json file for all, below
    for workload in args.workloads.split(","):
        common = ["--workload", workload, "--device", args.device, "--dtype", args.dtype,
                  "--steps", str(args.steps), "--warmup", str(args.warmup)]
        if args.batch:
            common += ["--batch", str(args.batch)]
        if args.threads:
            common += ["--threads", str(args.threads)]
        if args.seq_len and workload == "gpt2":
            common += ["--seq-len", str(args.seq_len)]
        if args.gpt2_loss != "default" and workload == "gpt2":
            common += ["--gpt2-loss", args.gpt2_loss]
        peer = [args.python, os.path.join(ROOT, "benchmarks", "python_train_loop.py")] + common
        tools = {
            "ddpbench single": lambda: ddpbench_step_ms(args.build, ["--strategy", "single", "--world-size", "1"] + common),
            "PyTorch single": lambda: tool_step_ms(peer + ["--strategy", "single"]),
            "ddpbench ddp world 1": lambda: ddpbench_step_ms(args.build, ["--strategy", "ddp", "--world-size", "1"] + common),
            "PyTorch DDP world 1": lambda: tool_step_ms(peer + ["--strategy", "ddp"]),
        }
        samples = run_rounds(tools, args.rounds)
        measured[workload] = samples
        loss = f", loss {args.gpt2_loss}" if workload == "gpt2" else ""
        med = report(per_workload, samples, f"{workload}{loss} on {args.device}, {args.dtype}, batch {args.batch or 'default'}, "
                     f"{args.steps} steps after {args.warmup} warm-up, {args.rounds} interleaved rounds",
                     "ddpbench single")
        ratios[workload] = {"single": med["PyTorch single"] / med["ddpbench single"],
                            "ddp world 1": med["PyTorch DDP world 1"] / med["ddpbench ddp world 1"]}
        print()
    print("| workload | ddpbench single / PyTorch single (throughput) | ddpbench ddp / PyTorch DDP, world 1 |")
    print("|---|---|---|")
    for workload, r in ratios.items():
        print(f"| {workload} | {r['single']:.3f}x | {r['ddp world 1']:.3f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "step_ms": measured, "throughput_ratios": ratios}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
