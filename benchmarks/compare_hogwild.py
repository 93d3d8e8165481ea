#!/usr/bin/python3
"""ddpbench `hogwild` against the seed's recipe in PyTorch's Python API (model.share_memory() and
torch.multiprocessing workers: benchmarks/python_hogwild.py) on `mlp`, one thread per worker, the
same batch per worker. Rounds are interleaved (benchmarks/interleave.py), every run in fresh
processes. ddpbench's figure is the mean step time over its measured steps (a step: one update by
every worker); the peer's is its measured window over the steps.

On the CPU (the default: 2 workers, each on a virtual device of its own) both run Debian's LibTorch
1.13 kernels, so the ratio measures how each runs the workers around them. In the same rounds:
ddpbench's threads mode (threads vs processes) and --sync-every 4, and with --before DIR another
build's processes mode (an earlier commit's ddpbench in DIR), to measure a change against what it
replaced in the same run.

With --device cuda every worker trains on GPU 0 (ddpbench: --world-size 1 --workers N; processes
mode shares the parameters by CUDA IPC, as the peer's torch.multiprocessing does), for each N of
--workers, beside ddpbench's `single`: processes against threads against the peer, and against one
GPU's plain loop. --python names the interpreter with a CUDA torch.

    benchmarks/compare_hogwild.py [--rounds 5] [--steps 30] [--warmup 5] [--batch 128] [--before DIR]
                                  [--device cpu|cuda] [--workers 1,2,4] [--python PYTHON]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import (add_to_json, ddpbench_mlp_step_ms, ddpbench_step_ms, parser, report,  # noqa: E402
                                   run_rounds, tool_step_ms)


def run_ddpbench(args, extra, build=None, workers=2):
    if build is not None:
        args = argparse.Namespace(**{**vars(args), "build": build})
    if args.device == "cuda":
        return ddpbench_step_ms(args.build, ["--strategy", "hogwild", "--workload", "mlp", "--device", "cuda",
                                             "--world-size", "1", "--workers", str(workers), "--threads", "1",
                                             "--batch", str(args.batch), "--steps", str(args.steps),
                                             "--warmup", str(args.warmup)] + list(extra))
    return ddpbench_mlp_step_ms(args, "hogwild", world=workers, threads=1, extra=extra)


def run_single_cuda(args):
    return ddpbench_step_ms(args.build, ["--strategy", "single", "--workload", "mlp", "--device", "cuda",
                                         "--threads", "1", "--batch", str(args.batch), "--steps", str(args.steps),
                                         "--warmup", str(args.warmup)])


def run_pytorch(args, workers=2):
    return tool_step_ms([args.python, os.path.join(ROOT, "benchmarks", "python_hogwild.py"), str(args.steps),
                         str(args.warmup), str(args.batch), "1", str(workers), args.device])


def cuda_tools(args, workers_list):
    """Every worker count's three ways on GPU 0, and one GPU's plain loop."""
    tools = {"ddpbench single": lambda: run_single_cuda(args)}
    for n in workers_list:
        tools[f"ddpbench hogwild processes, {n} workers"] = lambda n=n: run_ddpbench(
            args, ["--hogwild-mode", "processes"], workers=n)
        tools[f"ddpbench hogwild threads, {n} workers"] = lambda n=n: run_ddpbench(
            args, ["--hogwild-mode", "threads"], workers=n)
        tools[f"PyTorch share_memory + torch.multiprocessing, {n} workers"] = lambda n=n: run_pytorch(args, n)
    return tools


def main():
    p = parser(__doc__, rounds=5, steps=30, batch=128)
    p.add_argument("--before", metavar="DIR", help="another ddpbench build to run beside this one (processes mode)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--workers", default=None, help="worker counts, comma-separated (--device cuda; default 1,2,4)")
    p.add_argument("--python", default="/usr/bin/python3", help="the interpreter with torch that runs the peer")
    args = p.parse_args()
    if args.before and not os.access(os.path.join(args.before, "ddpbench"), os.X_OK):
        p.error(f"--before: no ddpbench executable in {args.before}")
    if args.device == "cpu" and args.workers is not None:
        p.error("--workers: the CPU comparison runs 2 workers, one per virtual device; --workers is for --device cuda")
    if args.device == "cuda":
        try:
            workers_list = [int(w) for w in (args.workers or "1,2,4").split(",")]
        except ValueError:
            p.error(f"--workers: '{args.workers}' is not a comma-separated list of counts")
        if any(w < 1 or args.batch % w for w in workers_list):
            p.error(f"--workers: every count must be at least 1 and divide --batch {args.batch}")
        samples = run_rounds(cuda_tools(args, workers_list), args.rounds)
        med = report(args, samples, f"mlp on one GPU, global batch {args.batch}, {args.steps} steps after "
                     f"{args.warmup} warm-up, {args.rounds} interleaved rounds", "ddpbench single", label="run")
        # The peer's ratio per worker count: its median step over ddpbench processes mode's (above 1:
        # ddpbench's throughput is higher).
        ratios = {}
        for n in workers_list:
            ratio = med[f"PyTorch share_memory + torch.multiprocessing, {n} workers"] / \
                med[f"ddpbench hogwild processes, {n} workers"]
            ratios[str(n)] = ratio
            print(f"{n} workers: ddpbench processes mode at {ratio:.3f}x the peer's throughput; threads mode at "
                  f"{med[f'PyTorch share_memory + torch.multiprocessing, {n} workers'] / med[f'ddpbench hogwild threads, {n} workers']:.3f}x")
        add_to_json(args, processes_over_peer_throughput=ratios)
        return 0

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
