#!/usr/bin/python3
"""PyTorch's own tensor parallelism (DTensor's `parallelize_module`, torch 2.4+: Debian trixie's
python3-torch 2.6) on `mlp` over Gloo on the CPU: the peer benchmarks/compare_tp.py runs against
ddpbench's `tp`. The same plan as ddpbench's mlp (fc1 ColwiseParallel, fc2 RowwiseParallel, fc3
ColwiseParallel, fc4 RowwiseParallel, on a one-dimensional CPU device mesh), optimizer (SGD, lr
0.01, momentum 0.9), synthetic data, batch and thread count; every rank trains on the whole batch;
each rank pinned to its own cores as ddpbench pins its ranks.

After the timed steps one more step is measured for its peak on rank 0 (benchmarks/heap_peak.py).
Prints rank 0's figures as JSON: {"step_ms": [...], "peak_bytes": N, "held_bytes": N, "peak_method": ...}.

    python_tp_loop.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_RANK WORLD
"""
import json
import sys
from collections import OrderedDict

import torch
import torch.nn as nn

from heap_peak import heap_counter, step_peak_bytes
from rank_processes import MlpBatches, join_gloo_group, report_and_leave, run_ranks, timed_steps


def rank_main(rank, world, port, steps, warmup, batch, threads, queue):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    join_gloo_group(rank, world, port, threads)
    mesh = init_device_mesh("cpu", (world,))
    data = MlpBatches(batch)
    heap = heap_counter()
    torch.manual_seed(42)
    model = nn.Sequential(OrderedDict([("fc1", nn.Linear(784, 1024)), ("relu1", nn.ReLU()),
                                       ("fc2", nn.Linear(1024, 1024)), ("relu2", nn.ReLU()),
                                       ("fc3", nn.Linear(1024, 1024)), ("relu3", nn.ReLU()),
                                       ("fc4", nn.Linear(1024, 10))]))
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(),
                                     "fc3": ColwiseParallel(), "fc4": RowwiseParallel()})
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(k):
        idx = data.indices(k)
        loss = nn.functional.cross_entropy(model(data.inputs.index_select(0, idx)), data.labels.index_select(0, idx))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = timed_steps(step, warmup, steps)

    def local_bytes(t):
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.numel() * t.element_size()
    held = sum(local_bytes(p) for p in model.parameters())
    held += sum(local_bytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    peak = step_peak_bytes(lambda: step(warmup + steps), held, heap)
    report_and_leave(rank, queue, {"step_ms": times, "peak_bytes": peak, "held_bytes": held,
                                   "peak_method": "heap counter" if heap is not None else "profiler"})


def main():
    steps, warmup, batch, threads, world = (int(a) for a in sys.argv[1:6])
    figures, rc = run_ranks("python_tp_loop.py", rank_main, world, (steps, warmup, batch, threads))
    if figures is not None:
        print(json.dumps(figures))
    return rc


if __name__ == "__main__":
    sys.exit(main())
