#!/usr/bin/python3
"""The `mlp` training loop in PyTorch's Python API (Debian's python3-torch): the peer that ddpbench's
`single` strategy is compared against (benchmarks/compare_single.py). Same model, loss, optimizer,
batch and thread count as the bare LibTorch loop.

    python_single_loop.py STEPS WARMUP BATCH THREADS  ->  one JSON line: {"step_ms": [...]}
"""
import json
import sys
import time

import torch
import torch.nn.functional as F


def main() -> int:
    if len(sys.argv) != 5:
        print("usage: python_single_loop.py STEPS WARMUP BATCH THREADS", file=sys.stderr)
        return 2
    steps, warmup, batch, threads = (int(a) for a in sys.argv[1:])
    torch.set_num_threads(threads)
    torch.manual_seed(42)
    model = torch.nn.Sequential(
        torch.nn.Linear(784, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    batches = 32
    inputs = torch.randn(batches * batch, 784)
    targets = torch.randint(0, 10, (batches * batch,))
    times = []
    for i in range(warmup + steps):
        start = time.perf_counter()
        b = i % batches
        x = inputs.narrow(0, b * batch, batch)
        y = targets.narrow(0, b * batch, batch)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1e3)
    print(json.dumps({"step_ms": times}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
