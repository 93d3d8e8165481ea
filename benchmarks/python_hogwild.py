#!/usr/bin/python3
"""The seed's Hogwild recipe in PyTorch's Python API (Debian's python3-torch): `model.share_memory()`,
then N `torch.multiprocessing` workers (the 'spawn' start method: no fork of a process that may
run threads), each with its own optimizer, training the shared model without locks on its own
shard of every global batch. The peer that benchmarks/compare_hogwild.py runs against ddpbench's
`hogwild --hogwild-mode processes`: same model, optimizer, synthetic data, per-worker batch and
thread count.

The workers meet at a barrier after the warm-up; the figure is the measured window (barrier to the
last worker's end) over the steps, where a step is one update by every worker, as in ddpbench.
Prints {"step_ms": [window / steps], "final_loss": ...} on stdout.

On CUDA (DEVICE cuda) the model is moved to the GPU before the workers start; torch.multiprocessing
hands its CUDA tensors to each worker by CUDA IPC (share_memory() is a no-op there), which is the
recipe's CUDA form. Each worker keeps its data on the GPU, and waits for its kernels before it
reads the clock.

    python_hogwild.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_WORKER WORKERS [DEVICE]
"""
import json
import sys
import time

import torch
import torch.multiprocessing as mp
import torch.nn as nn


def make_model():
    torch.manual_seed(42)
    return nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                         nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))


def worker(rank, model, workers, steps, warmup, batch, threads, barrier, queue, device):
    torch.set_num_threads(threads)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # momentum buffers per worker
    gen = torch.Generator().manual_seed(42)
    size = 32 * batch
    inputs = torch.randn(size, 784, generator=gen).to(device)
    labels = torch.randint(0, 10, (size,), generator=gen).to(device)
    loss_fn = nn.CrossEntropyLoss()
    shard = batch // workers
    perm = None
    loss = None

    def update(step):
        nonlocal perm, loss
        k = step % 32
        if k == 0:
            perm = torch.randperm(size, generator=torch.Generator().manual_seed(step // 32)).to(device)
        idx = perm[k * batch:(k + 1) * batch][rank * shard:(rank + 1) * shard]
        loss = loss_fn(model(inputs.index_select(0, idx)), labels.index_select(0, idx))
        opt.zero_grad()
        loss.backward()
        opt.step()

    for step in range(warmup):
        update(step)
    sync()
    barrier.wait()
    start = time.perf_counter()
    for step in range(warmup, warmup + steps):
        update(step)
    sync()
    queue.put((rank, start, time.perf_counter(), loss.item()))


def main():
    steps, warmup, batch, threads, workers = (int(a) for a in sys.argv[1:6])
    device = sys.argv[6] if len(sys.argv) > 6 else "cpu"
    ctx = mp.get_context("spawn")
    model = make_model().to(device)
    model.share_memory()
    barrier = ctx.Barrier(workers)
    queue = ctx.SimpleQueue()
    procs = [ctx.Process(target=worker, args=(r, model, workers, steps, warmup, batch, threads, barrier, queue, device))
             for r in range(workers)]
    for p in procs:
        p.start()
    reports = [queue.get() for _ in procs]
    for p in procs:
        p.join()
    start = min(r[1] for r in reports)
    end = max(r[2] for r in reports)
    losses = [r[3] for r in sorted(reports)]
    print(json.dumps({"step_ms": [(end - start) * 1e3 / steps], "final_loss": sum(losses) / len(losses)}))
    return 0 if all(p.exitcode == 0 for p in procs) else 1


if __name__ == "__main__":
    sys.exit(main())
