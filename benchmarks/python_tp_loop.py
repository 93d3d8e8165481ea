#!/usr/bin/python3
"""PyTorch's own tensor parallelism (DTensor's `parallelize_module`, torch 2.4+: Debian trixie's
python3-torch 2.6) over Gloo on the CPU: the peer benchmarks/compare_tp.py runs against ddpbench's
`tp`, on a one-dimensional CPU device mesh, every rank training on the whole batch, each rank
pinned to its own cores as ddpbench pins its ranks. The same plan as ddpbench's:

- mlp: fc1 ColwiseParallel, fc2 RowwiseParallel, fc3 ColwiseParallel, fc4 RowwiseParallel; SGD (lr
  0.01, momentum 0.9).
- transformer: ddpbench's (vocabulary 1000, width 128, 2 post-norm layers of 4 heads, feed-forward
  512, 64 tokens), its layers written with separate q, k and v projections (PyTorch's
  MultiheadAttention holds them packed, out of parallelize_module's reach, as ddpbench's plan packs
  them in one projection split alike): q, k, v and linear1 ColwiseParallel, the attention's output
  projection and linear2 RowwiseParallel, the token embedding RowwiseParallel (split by
  vocabulary), the head ColwiseParallel with its logits left sharded and the loss under
  loss_parallel() (vocabulary-parallel cross-entropy); AdamW (lr 1e-3) as ddpbench's.

With DP_SIZE (ddpbench's --mesh dp=DP_SIZE,tp=WORLD/DP_SIZE) the mesh is 2-D, ("dp", "tp"),
row-major as ddpbench lays it: the plan over each tp group, each dp group's rank taking its share of
the global batch (samples d, d + DP_SIZE, ...), and PyTorch's DDP over the dp group wrapped around
the parallelized model after `_pre_dp_module_transform`, PyTorch's documented way to compose tensor
parallelism with DDP. With DP_KIND fsdp (ddpbench's --mesh fsdp=DP_SIZE,tp=...) the mesh's first
dimension is ("fsdp") and FSDP2's fully_shard over it wraps the parallelized model instead, each of
ddpbench's wrap units its own (mlp: each Linear; transformer: each layer), then the root, none
resharded after its forward: torchtitan's FSDP x TP.

After the timed steps one more step is measured for its peak on rank 0 (benchmarks/heap_peak.py).
Prints rank 0's figures as JSON: {"step_ms": [...], "peak_bytes": N, "held_bytes": N, "peak_method": ...}.

    python_tp_loop.py STEPS WARMUP GLOBAL_BATCH THREADS_PER_RANK WORLD [mlp|transformer] [DP_SIZE] [dp|fsdp]
"""
import json
import math
import sys
from collections import OrderedDict

import torch
import torch.nn as nn

from heap_peak import heap_counter, step_peak_bytes
from rank_processes import MlpBatches, join_gloo_group, report_and_leave, run_ranks, timed_steps


VOCAB, EMBED, HEADS, FEED_FORWARD, SEQUENCE, LAYERS = 1000, 128, 4, 512, 64, 2


class EncoderLayer(nn.Module):
    """One of ddpbench's transformer layers (post-norm, ReLU, no dropout), sequence-first, with q, k
    and v apart; the heads' count read from q's width, which is this rank's heads' under the plan."""

    def __init__(self):
        super().__init__()
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(EMBED, EMBED) for _ in range(4))
        self.linear1, self.linear2 = nn.Linear(EMBED, FEED_FORWARD), nn.Linear(FEED_FORWARD, EMBED)
        self.norm1, self.norm2 = nn.LayerNorm(EMBED), nn.LayerNorm(EMBED)

    def forward(self, h, mask):
        seq, batch, head_width = h.size(0), h.size(1), EMBED // HEADS
        q, k, v = self.wq(h), self.wk(h), self.wv(h)
        width = q.size(-1)

        def heads(z):
            return z.reshape(seq, batch * (width // head_width), head_width).transpose(0, 1)
        scores = torch.bmm(heads(q) / math.sqrt(head_width), heads(k).transpose(1, 2)) + mask
        attended = torch.bmm(torch.softmax(scores, -1), heads(v)).transpose(0, 1).reshape(seq, batch, width)
        x = self.norm1(h + self.wo(attended))
        return self.norm2(x + self.linear2(torch.relu(self.linear1(x))))


class CausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(VOCAB, EMBED), nn.Embedding(SEQUENCE, EMBED)
        self.layers = nn.ModuleList(EncoderLayer() for _ in range(LAYERS))
        self.head = nn.Linear(EMBED, VOCAB)

    def forward(self, tokens):
        seq = tokens.size(1)
        h = (self.tokens(tokens) + self.positions(torch.arange(seq)).unsqueeze(0)).transpose(0, 1)
        mask = torch.full((seq, seq), float("-inf")).triu(1)
        for layer in self.layers:
            h = layer(h, mask)
        return self.head(h.transpose(0, 1))


def data_parallel(model, dp, units=()):
    """`model` (already parallelized over its tp group) under PyTorch's DDP over the dp mesh `dp`,
    or under FSDP2 over it (`dp` named "fsdp": each of `units` sharded on its own, then the root);
    as it is without one."""
    if dp is None:
        return model
    if dp.mesh_dim_names == ("fsdp",):
        from python_fsdp_loop import complete_cpu_streams
        complete_cpu_streams()  # torch 2.6's CPU streams, as FSDP2 calls them (see there)
        try:
            from torch.distributed.fsdp import fully_shard
        except ImportError:  # before 2.6's public name
            from torch.distributed._composable.fsdp import fully_shard
        # No unit is resharded after its forward (SHARD_GRAD_OP; ddpbench's side runs with
        # --reshard-after-forward off): over TP on the CPU, torch 2.6 fails autograd's version check on
        # the transformer when they are ("one of the variables needed for gradient computation has
        # been modified by an inplace operation: [torch.FloatTensor [128]] is at version 2").
        for unit in units:
            fully_shard(unit, mesh=dp, reshard_after_forward=False)
        fully_shard(model, mesh=dp, reshard_after_forward=False)
        return model
    from torch.distributed.tensor.parallel.ddp import _pre_dp_module_transform
    from torch.nn.parallel import DistributedDataParallel
    _pre_dp_module_transform(model)
    return DistributedDataParallel(model, process_group=dp.get_group())


def my_share(rows, dp):
    """This dp rank's samples of a global batch's rows: d, d + D, ... (ddpbench's sampler's)."""
    return rows if dp is None else rows[dp.get_local_rank()::dp.size()]


def mlp_step(mesh, batch, dp=None):
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    data = MlpBatches(batch)
    model = nn.Sequential(OrderedDict([("fc1", nn.Linear(784, 1024)), ("relu1", nn.ReLU()),
                                       ("fc2", nn.Linear(1024, 1024)), ("relu2", nn.ReLU()),
                                       ("fc3", nn.Linear(1024, 1024)), ("relu3", nn.ReLU()),
                                       ("fc4", nn.Linear(1024, 10))]))
    parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel(),
                                     "fc3": ColwiseParallel(), "fc4": RowwiseParallel()})
    model = data_parallel(model, dp, [model.fc1, model.fc2, model.fc3, model.fc4])
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(k):
        idx = my_share(data.indices(k), dp)
        loss = nn.functional.cross_entropy(model(data.inputs.index_select(0, idx)), data.labels.index_select(0, idx))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt, step


def transformer_step(mesh, batch, dp=None):
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, loss_parallel, parallelize_module
    gen = torch.Generator().manual_seed(42)
    tokens = torch.randint(0, VOCAB, (32 * batch, SEQUENCE + 1), generator=gen)
    inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    model = CausalLM()
    plan = {"tokens": RowwiseParallel(input_layouts=Replicate()),
            "head": ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)}
    for i in range(LAYERS):
        plan.update({f"layers.{i}.{name}": ColwiseParallel() for name in ("wq", "wk", "wv", "linear1")})
        plan.update({f"layers.{i}.{name}": RowwiseParallel() for name in ("wo", "linear2")})
    parallelize_module(model, mesh, plan)
    model = data_parallel(model, dp, list(model.layers))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step(k):
        rows = my_share(torch.arange((k % 32) * batch, (k % 32 + 1) * batch), dp)
        logits = model(inputs[rows])
        with loss_parallel():
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), targets[rows].flatten())
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    return model, opt, step


def rank_main(rank, world, port, steps, warmup, batch, threads, workload, dp_size, dp_kind, queue):
    from torch.distributed.device_mesh import init_device_mesh

    join_gloo_group(rank, world, port, threads)
    if dp_size > 1:
        mesh = init_device_mesh("cpu", (dp_size, world // dp_size), mesh_dim_names=(dp_kind, "tp"))
        tp, dp = mesh["tp"], mesh[dp_kind]
    else:
        tp, dp = init_device_mesh("cpu", (world,)), None
    heap = heap_counter()
    torch.manual_seed(42)
    model, opt, step = (transformer_step if workload == "transformer" else mlp_step)(tp, batch, dp)

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
    workload = sys.argv[6] if len(sys.argv) > 6 else "mlp"
    dp_size = int(sys.argv[7]) if len(sys.argv) > 7 else 1
    dp_kind = sys.argv[8] if len(sys.argv) > 8 else "dp"
    figures, rc = run_ranks("python_tp_loop.py", rank_main, world,
                            (steps, warmup, batch, threads, workload, dp_size, dp_kind))
    if figures is not None:
        print(json.dumps(figures))
    return rc


if __name__ == "__main__":
    sys.exit(main())
