#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel on `mlp` (Debian's python3-torch, Gloo): the peer that
benchmarks/compare_ddp.py runs against ddpbench's `ddp`; with OPTIMIZER `zero`, DDP with PyTorch's
ZeroRedundancyOptimizer (ZeRO stage 1: each rank steps its share of the parameters and broadcasts
it), the peer benchmarks/compare_zero.py runs against ddpbench's `zero1`; with --grad-accum=K,
DDP's own accumulation (K micro-batches a step, the first K - 1 under `no_sync()`, each loss over K),
the peer benchmarks/compare_grad_accum.py runs against `ddp --grad-accum K`. Same model, optimizer,
synthetic data, per-rank batch and thread count; each rank pinned to its own cores as ddpbench pins
its ranks. Prints rank 0's figures as JSON: {"step_ms": [...]}, and with --peak "peak_bytes": one
more step's peak on rank 0, all the rank held since before the model was built (parameters,
gradients, DDP's buckets, momentum) plus the most the step allocated on top, as ddpbench's
peak_allocated_bytes counts it. --peak needs benchmarks/heap_counter.c preloaded (LD_PRELOAD): only
it sees DDP's buckets and every thread.

    python_ddp_loop.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_RANK WORLD [BUCKET_MB [sgd|zero]]
                       [--grad-accum=K] [--peak]
"""
import contextlib
import json
import sys

import torch
import torch.nn as nn

from heap_peak import heap_counter, step_peak_bytes
from rank_processes import MlpBatches, join_gloo_group, report_and_leave, run_ranks, timed_steps


def rank_main(rank, world, port, steps, warmup, batch, threads, bucket_mb, optimizer, micro_batches, peak, queue):
    join_gloo_group(rank, world, port, threads)
    data = MlpBatches(batch)
    heap = heap_counter() if peak else None
    before_model = heap.heap_counter_live() if heap is not None else None
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    if optimizer == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(k):
        # A new epoch every 32 steps, reshuffled as a DistributedSampler with set_epoch does.
        idx = data.indices(k)[rank::world]
        x, y = data.inputs.index_select(0, idx), data.labels.index_select(0, idx)
        # PyTorch's recipe: no all-reduce until the last micro-batch's backward, each loss scaled
        # so the accumulated gradient is the whole batch's mean (the micro-batches are equal).
        for i, (xs, ys) in enumerate(zip(x.chunk(micro_batches), y.chunk(micro_batches))):
            with ddp.no_sync() if i < micro_batches - 1 else contextlib.nullcontext():
                (loss_fn(ddp(xs), ys) / micro_batches).backward()
        opt.step()
        opt.zero_grad()

    times = timed_steps(step, warmup, steps)
    figures = {"step_ms": times}
    if peak:
        figures["peak_bytes"] = step_peak_bytes(lambda: step(warmup + steps), heap.heap_counter_live() - before_model, heap)
    # The optimizer and DDP go before the group they use: torch 1.13's ZeroRedundancyOptimizer
    # otherwise aborted at exit ("terminate called without an active exception") in about 1 run in 6.
    del opt, ddp
    report_and_leave(rank, queue, figures)


def main():
    flags = [a for a in sys.argv[1:] if a.startswith("--")]
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps, warmup, batch, threads, world = (int(a) for a in args[:5])
    bucket_mb = float(args[5]) if len(args) > 5 else 25.0
    optimizer = args[6] if len(args) > 6 else "sgd"
    if optimizer not in ("sgd", "zero"):
        print(f"python_ddp_loop.py: OPTIMIZER must be sgd or zero, not {optimizer!r}", file=sys.stderr)
        return 2
    micro_batches, peak = 1, False
    for flag in flags:
        if flag.startswith("--grad-accum=") and flag.split("=", 1)[1].isdigit() and int(flag.split("=", 1)[1]) > 0:
            micro_batches = int(flag.split("=", 1)[1])
        elif flag == "--peak":
            peak = True
        else:
            print(f"python_ddp_loop.py: unknown flag {flag!r} (--grad-accum=K with K > 0, --peak)", file=sys.stderr)
            return 2
    if peak and heap_counter() is None:
        print("python_ddp_loop.py: --peak needs benchmarks/heap_counter.c preloaded (LD_PRELOAD)", file=sys.stderr)
        return 2
    if (batch // world) % micro_batches:
        print(f"python_ddp_loop.py: --grad-accum={micro_batches} does not divide a rank's {batch // world} rows",
              file=sys.stderr)
        return 2
    figures, rc = run_ranks("python_ddp_loop.py", rank_main, world,
                            (steps, warmup, batch, threads, bucket_mb, optimizer, micro_batches, peak))
    if figures is not None:
        print(json.dumps(figures))
    return rc


if __name__ == "__main__":
    sys.exit(main())
