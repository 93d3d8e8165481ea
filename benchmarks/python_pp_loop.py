#!/usr/bin/python3
"""PyTorch's own pipeline parallelism (`torch.distributed.pipelining`, torch 2.4+: Debian trixie's
python3-torch 2.6) on `mlp` over Gloo on the CPU: the peer benchmarks/compare_pp.py runs against
ddpbench's `pp`. Rank r builds stage r by hand (PipelineStage on its run of mlp's four layers, cut
where ddpbench is told to cut with --pp-split), and runs ScheduleGPipe or Schedule1F1B with the same
micro-batches. Same model, optimizer (SGD, lr 0.01, momentum 0.9), synthetic data, batch and thread
count as ddpbench; each rank pinned to its own cores as ddpbench pins its ranks.

torch 2.6's schedules wait on one Work of each batched send/recv only (`_batch_p2p` returns
batch_isend_irecv(...).pop()); over Gloo, Schedule1F1B then hangs in its first step (pytorch#132644,
fixed upstream by #152938 in 2025, after 2.6). With --wait-all-p2p (compare_pp.py's default for the
peer) `_batch_p2p` waits on every Work of the batch, as the fix does; without it the hang can be seen
(compare_pp.py --peer-as-shipped).

With --dp D (ddpbench's --mesh dp=D,pp=WORLD/D) the ranks are a 2-D grid laid out row-major as
ddpbench lays it: rank r is stage r % P of pipeline r // P. Each pipeline trains on its dp rank's
samples of the global batch (d, d + D, ...: ddpbench's sampler's), and each stage's module is
wrapped in PyTorch's DDP over its dp group: PipelineStage runs all but the last micro-batch's
backward under no_sync, so the gradients are all-reduced once a step (torchtitan's PP x DDP). With
--dp-kind fsdp (ddpbench's --mesh fsdp=D,pp=P) each stage's module is instead one FSDP2 unit over
its fsdp group (fully_shard, reshard_after_forward=False, as torchtitan runs FSDP under PP and as
ddpbench gathers a stage for the whole step); PipelineStage defers its gradient sync to the last
micro-batch's backward.

After the timed steps one more step is measured for its peak on rank 0 (the first stage), as
python_fsdp_loop.py does (benchmarks/heap_peak.py).

Prints rank 0's figures as JSON: {"step_ms": [...], "peak_bytes": N, "held_bytes": N, "peak_method": ...}.

    python_pp_loop.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_RANK WORLD SCHEDULE MICROBATCHES CUTS [--wait-all-p2p]
                      [--dp D] [--dp-kind dp|fsdp]

SCHEDULE: gpipe or 1f1b; CUTS: the layers where stages begin after the first, "2" for [0,2) [2,4)
(a pipeline's stages: WORLD / D of them).
"""
import json
import sys

import torch
import torch.distributed as dist
import torch.nn as nn

from heap_peak import heap_counter, step_peak_bytes
from rank_processes import MlpBatches, join_gloo_group, report_and_leave, run_ranks, timed_steps


class _AllWorks:
    """Every Work of one batch_isend_irecv, waited on together."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()
        return True


def wait_on_every_p2p_work():
    """torch 2.6's _batch_p2p made to wait on all its Works (upstream's fix, #152938)."""
    import torch.distributed.pipelining.schedules as schedules

    def batch_p2p(p2p_ops, desc=None):
        return _AllWorks(dist.batch_isend_irecv(p2p_ops)) if p2p_ops else None
    schedules._batch_p2p = batch_p2p


def mesh_groups(rank, world, dp):
    """This rank's pipeline group and dp group (None at dp 1) on the row-major (dp, pp) grid; every
    rank creates every group, in the same order, as new_group requires."""
    pp = world // dp
    pipeline_group = data_group = None
    for d in range(dp):
        g = dist.new_group([d * pp + i for i in range(pp)])
        if rank // pp == d:
            pipeline_group = g
    if dp > 1:
        for i in range(pp):
            g = dist.new_group([d * pp + i for d in range(dp)])
            if rank % pp == i:
                data_group = g
    return pipeline_group, data_group


def rank_main(rank, world, port, steps, warmup, batch, threads, schedule, microbatches, cuts, wait_all, dp, dp_kind,
              queue):
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

    if wait_all:
        wait_on_every_p2p_work()
    join_gloo_group(rank, world, port, threads)
    pp = world // dp
    stage_index, dp_rank = rank % pp, rank // pp
    if dp_kind == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from python_fsdp_loop import complete_cpu_streams
        complete_cpu_streams()  # torch 2.6's CPU streams, as FSDP2 calls them (see there)
        mesh = init_device_mesh("cpu", (dp, pp), mesh_dim_names=("fsdp", "pp"))
        pipeline_group, data_group = mesh["pp"].get_group(), None
    else:
        pipeline_group, data_group = mesh_groups(rank, world, dp)
    data = MlpBatches(batch)
    heap = heap_counter()
    torch.manual_seed(42)
    layers = [nn.Sequential(nn.Linear(784, 1024), nn.ReLU()), nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()),
              nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()), nn.Linear(1024, 10)]
    bounds = [0] + cuts + [len(layers)]
    part = nn.Sequential(*layers[bounds[stage_index]:bounds[stage_index + 1]])
    del layers
    module = part if data_group is None else nn.parallel.DistributedDataParallel(part, process_group=data_group)
    if dp_kind == "fsdp":
        from torch.distributed.fsdp import fully_shard
        module = fully_shard(part, mesh=mesh["fsdp"], reshard_after_forward=False)
    stage = PipelineStage(module, stage_index, pp, torch.device("cpu"), group=pipeline_group)
    kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[schedule]
    pipe = kind(stage, n_microbatches=microbatches, loss_fn=nn.functional.cross_entropy)
    opt = torch.optim.SGD(part.parameters(), lr=0.01, momentum=0.9)

    def step(k):
        idx = data.indices(k)[dp_rank::dp]  # this pipeline's share of the global batch
        if stage_index == 0:
            pipe.step(data.inputs.index_select(0, idx))
        elif stage_index == pp - 1:
            pipe.step(target=data.labels.index_select(0, idx), losses=[])
        else:
            pipe.step()
        opt.step()
        opt.zero_grad(set_to_none=True)

    times = timed_steps(step, warmup, steps)
    held = sum(p.numel() * p.element_size() for p in part.parameters())
    held += sum(v.numel() * v.element_size() for s in opt.state.values() for v in s.values() if torch.is_tensor(v) and v.dim() > 0)
    peak = step_peak_bytes(lambda: step(warmup + steps), held, heap)
    report_and_leave(rank, queue, {"step_ms": times, "peak_bytes": peak, "held_bytes": held,
                                   "peak_method": "heap counter" if heap is not None else "profiler"})


def main():
    argv = sys.argv[1:]
    dp, dp_kind = 1, "dp"
    if "--dp" in argv:
        at = argv.index("--dp")
        dp = int(argv[at + 1])
        del argv[at:at + 2]
    if "--dp-kind" in argv:
        at = argv.index("--dp-kind")
        dp_kind = argv[at + 1]
        del argv[at:at + 2]
    if dp_kind not in ("dp", "fsdp"):
        print(f"python_pp_loop.py: --dp-kind: dp or fsdp, not {dp_kind!r}", file=sys.stderr)
        return 2
    args = [a for a in argv if not a.startswith("--")]
    steps, warmup, batch, threads, world = (int(a) for a in args[:5])
    schedule, microbatches = args[5], int(args[6])
    cuts = [int(c) for c in args[7].split(",")]
    if dp < 1 or world % dp != 0 or len(cuts) != world // dp - 1:
        print(f"python_pp_loop.py: {len(cuts) + 1} stages a pipeline for {world} ranks in {dp} pipeline(s)", file=sys.stderr)
        return 2
    figures, rc = run_ranks("python_pp_loop.py", rank_main, world,
                            (steps, warmup, batch, threads, schedule, microbatches, cuts, "--wait-all-p2p" in argv, dp,
                             dp_kind))
    if figures is not None:
        print(json.dumps(figures))
    return rc


if __name__ == "__main__":
    sys.exit(main())
