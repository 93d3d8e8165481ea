#!/usr/bin/python3
"""PyTorch's FSDP2 (`fully_shard`, torch 2.4+: Debian trixie's python3-torch 2.6) on `mlp` over a CPU
device mesh (Gloo): the peer benchmarks/compare_fsdp.py runs against ddpbench's `fsdp`. Each Linear
is its own FSDP unit, as ddpbench's mlp names fc1..fc4, then the root; resharded after forward (both
tools' default). Same model, optimizer (SGD, momentum 0.9), synthetic data, per-rank batch and
thread count as ddpbench; each rank pinned to its own cores as ddpbench pins its ranks.

After the timed steps one more step is measured: its peak on rank 0 is the bytes held before the
step (the local shards of the parameters, their gradients if kept, and the optimizer state) plus
the most the step allocated on top of them, ddpbench's peak_allocated_bytes in kind. Under
benchmarks/heap_counter.c (LD_PRELOAD, as compare_fsdp.py runs it) that is counted exactly, on every
thread; "between_steps_bytes" is then all the rank holds between steps beyond what it held before
the model was built, to check that `held` misses nothing. Without it the step runs under
torch.profiler's memory events, whose running sum is no exact peak here: they see one thread, and a
steady-state step's events do not balance (about one unit's buffer more allocated than freed).

Prints rank 0's figures as JSON: {"step_ms": [...], "peak_bytes": N, "held_bytes": N, "peak_method":
"heap counter" | "profiler", "between_steps_bytes": N or null}.

    python_fsdp_loop.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_RANK WORLD [--no-reshard] [--keep-grads]

--no-reshard: no unit is resharded after forward (torch 2.6's CPU path fails autograd's version
check on one that is, so even by default the last unit is left gathered, as TorchTitan leaves its
last block). --keep-grads: zero_grad(set_to_none=False), gradient shards kept between steps.
"""
import json
import sys

import torch
import torch.nn as nn

from heap_peak import heap_counter, step_peak_bytes
from rank_processes import MlpBatches, join_gloo_group, report_and_leave, run_ranks, timed_steps


def local_bytes(t):
    t = t.to_local() if hasattr(t, "to_local") else t
    return t.numel() * t.element_size()


def complete_cpu_streams():
    """torch 2.6's torch.cpu.Stream lacks record_event and wait_event, which FSDP2 calls on whatever
    device it runs (its CPU path is otherwise complete; later PyTorch adds them). On the CPU every
    kernel runs in order on the calling thread, so an event is complete once recorded: the two
    methods are added doing nothing, as torch.cpu.Event's own methods do. Collectives are still
    waited for: FSDP2 waits on an asynchronous all-gather's Work, and its reduce-scatter is blocking."""
    if not hasattr(torch.cpu.Stream, "record_event"):
        torch.cpu.Stream.record_event = lambda self, event=None: torch.cpu.Event()
    if not hasattr(torch.cpu.Stream, "wait_event"):
        torch.cpu.Stream.wait_event = lambda self, event: None


def rank_main(rank, world, port, steps, warmup, batch, threads, reshard, keep_grads, queue):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    complete_cpu_streams()
    join_gloo_group(rank, world, port, threads)
    mesh = init_device_mesh("cpu", (world,))
    data = MlpBatches(batch)
    heap = heap_counter()
    before_model = heap.heap_counter_live() if heap is not None else None
    torch.manual_seed(42)
    model = nn.Sequential(nn.Linear(784, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 10))
    layers = [m for m in model if isinstance(m, nn.Linear)]
    for i, layer in enumerate(layers):
        # The last unit is not resharded, as TorchTitan wraps its last block: backward needs it at
        # once (and torch 2.6's CPU path fails its autograd version check when it is).
        fully_shard(layer, mesh=mesh, reshard_after_forward=reshard and i < len(layers) - 1)
    fully_shard(model, mesh=mesh, reshard_after_forward=reshard)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    def step(k):
        # A new epoch every 32 steps, reshuffled as a DistributedSampler with set_epoch does.
        idx = data.indices(k)[rank::world]
        x, y = data.inputs.index_select(0, idx), data.labels.index_select(0, idx)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=not keep_grads)

    times = timed_steps(step, warmup, steps)
    held = sum(local_bytes(p) for p in model.parameters())
    held += sum(local_bytes(p.grad) for p in model.parameters() if p.grad is not None)
    held += sum(local_bytes(v) for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    between = heap.heap_counter_live() - before_model if heap is not None else None
    peak = step_peak_bytes(lambda: step(warmup + steps), held, heap)
    report_and_leave(rank, queue, {"step_ms": times, "peak_bytes": peak, "held_bytes": held,
                                   "peak_method": "heap counter" if heap is not None else "profiler",
                                   "between_steps_bytes": between})


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    steps, warmup, batch, threads, world = (int(a) for a in args[:5])
    reshard, keep_grads = "--no-reshard" not in sys.argv, "--keep-grads" in sys.argv
    figures, rc = run_ranks("python_fsdp_loop.py", rank_main, world, (steps, warmup, batch, threads, reshard, keep_grads))
    if figures is not None:
        print(json.dumps(figures))
    return rc


if __name__ == "__main__":
    sys.exit(main())
