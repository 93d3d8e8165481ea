#!/usr/bin/python3
"""PyTorch's own DistributedDataParallel on `mlp` (Debian's python3-torch, Gloo): the peer that
benchmarks/compare_ddp.py runs against ddpbench's `ddp`, and, with OPTIMIZER `zero`, DDP with
PyTorch's ZeroRedundancyOptimizer (ZeRO stage 1: each rank steps its share of the parameters and
broadcasts it), the peer benchmarks/compare_zero.py runs against ddpbench's `zero1`. Same model,
optimizer, synthetic data, per-rank batch and thread count; each rank pinned to its own cores as
ddpbench pins its ranks. Prints rank 0's step times as JSON: {"step_ms": [...]}.

    python_ddp_loop.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_RANK WORLD [BUCKET_MB [sgd|zero]]
"""
import json
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn

from rank_processes import join_gloo_group, run_ranks


def rank_main(rank, world, port, steps, warmup, batch, threads, bucket_mb, optimizer, queue):
    join_gloo_group(rank, world, port, threads)
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=bucket_mb)
    if optimizer == "zero":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.SGD, lr=0.01, momentum=0.9)
    else:
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    gen = torch.Generator().manual_seed(42)
    size = 32 * batch
    inputs = torch.randn(size, 784, generator=gen)
    labels = torch.randint(0, 10, (size,), generator=gen)
    loss_fn = nn.CrossEntropyLoss()
    times = []
    perm = None
    for step in range(warmup + steps):
        k = step % 32
        if k == 0:  # a new epoch: reshuffle, as a DistributedSampler with set_epoch does
            perm = torch.randperm(size, generator=torch.Generator().manual_seed(step // 32))
        start = time.perf_counter()
        idx = perm[k * batch:(k + 1) * batch][rank::world]
        x, y = inputs.index_select(0, idx), labels.index_select(0, idx)
        loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if step >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    if rank == 0:
        queue.put(times)
    # The optimizer and DDP go before the group they use: torch 1.13's ZeroRedundancyOptimizer
    # otherwise aborted at exit ("terminate called without an active exception") in about 1 run in 6.
    del opt, ddp
    dist.barrier()
    dist.destroy_process_group()


def main():
    steps, warmup, batch, threads, world = (int(a) for a in sys.argv[1:6])
    bucket_mb = float(sys.argv[6]) if len(sys.argv) > 6 else 25.0
    optimizer = sys.argv[7] if len(sys.argv) > 7 else "sgd"
    if optimizer not in ("sgd", "zero"):
        print(f"python_ddp_loop.py: OPTIMIZER must be sgd or zero, not {optimizer!r}", file=sys.stderr)
        return 2
    times, rc = run_ranks("python_ddp_loop.py", rank_main, world, (steps, warmup, batch, threads, bucket_mb, optimizer))
    if times is not None:
        print(json.dumps({"step_ms": times}))
    return rc


if __name__ == "__main__":
    sys.exit(main())
