#!/usr/bin/env python3
"""ddpbench's `mlp`, `transformer` and `gpt2` workloads in PyTorch's own Python API, trained by one process
as plain code (`single`) or wrapped in torch's DistributedDataParallel with one rank (`ddp`, NCCL on
CUDA, Gloo on CPU): the peer benchmarks/compare_python_api.py runs against ddpbench on the same
machine, with the same torch (on the GPU machine, the wheel's; here, Debian's python3-torch).

Same model, loss, optimizer, batch and dtype as ddpbench (WORKLOADS.md); mixed precision with
torch.autocast, and fp16 with a GradScaler. Each step is timed on the host after synchronising the
device, as ddpbench times its steps. Prints one JSON line: {"step_ms": [...]}.

    python_train_loop.py --workload mlp|transformer|gpt2 [--strategy single|ddp] [--device cpu|cuda]
                         [--dtype fp32|bf16|fp16] [--steps 30] [--warmup 5] [--batch N] [--threads N]
                         [--seq-len N] [--gpt2-loss plain|fused]
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

from rank_processes import free_port

VOCAB, EMBED, LAYERS, HEADS, FEED_FORWARD, SEQUENCE = 1000, 128, 2, 4, 512, 64

# --activation-checkpointing full: each of ddpbench's wrap units (mlp's layers, transformer's encoder
# layers, gpt2's blocks) through torch.utils.checkpoint, non-reentrant, as PyTorch recommends.
CHECKPOINT = False


def checkpointed(module, *inputs):
    from torch.utils.checkpoint import checkpoint
    return checkpoint(module, *inputs, use_reentrant=False)


class CheckpointedSequential(nn.Sequential):
    """mlp with each Linear (and the ReLU after it) a checkpointed unit, as ddpbench's fc1..fc4."""

    def forward(self, x):
        for unit in self:
            x = checkpointed(unit, x) if CHECKPOINT else unit(x)
        return x


class CausalLM(nn.Module):
    """ddpbench's `transformer`: token and position embeddings, a sequence-first encoder without
    dropout, causal mask, a head over the vocabulary."""

    def __init__(self):
        super().__init__()
        self.tokens = nn.Embedding(VOCAB, EMBED)
        self.positions = nn.Embedding(SEQUENCE, EMBED)
        layer = nn.TransformerEncoderLayer(EMBED, HEADS, dim_feedforward=FEED_FORWARD, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, LAYERS)
        self.head = nn.Linear(EMBED, VOCAB)

    def forward(self, tokens):
        seq = tokens.size(1)
        h = self.tokens(tokens) + self.positions(torch.arange(seq, device=tokens.device)).unsqueeze(0)
        mask = torch.full((seq, seq), float("-inf"), device=tokens.device).triu(1)
        if CHECKPOINT:  # each encoder layer on its own, checkpointed: ddpbench's units
            h = h.transpose(0, 1)
            for layer in self.encoder.layers:
                h = checkpointed(layer, h, mask)
            return self.head(h.transpose(0, 1))
        return self.head(self.encoder(h.transpose(0, 1), mask).transpose(0, 1))


GPT2_VOCAB, GPT2_CONTEXT, GPT2_LAYERS, GPT2_HEADS, GPT2_WIDTH = 50257, 1024, 12, 12, 768


class Gpt2Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln_1, self.ln_2 = nn.LayerNorm(GPT2_WIDTH), nn.LayerNorm(GPT2_WIDTH)
        self.c_attn = nn.Linear(GPT2_WIDTH, 3 * GPT2_WIDTH)
        self.attn_proj = nn.Linear(GPT2_WIDTH, GPT2_WIDTH)
        self.c_fc = nn.Linear(GPT2_WIDTH, 4 * GPT2_WIDTH)
        self.mlp_proj = nn.Linear(4 * GPT2_WIDTH, GPT2_WIDTH)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        heads = lambda z: z.view(b, t, GPT2_HEADS, c // GPT2_HEADS).transpose(1, 2)  # noqa: E731
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        x = x + self.attn_proj(y.transpose(1, 2).contiguous().view(b, t, c))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


# One chunk's fp32 logits in the fused loss, as ddpbench's gpt2 sizes it (workloads/gpt2.cpp).
GPT2_LOGITS_CHUNK_ROWS = (256 << 20) // (GPT2_VOCAB * 4)


def _product_dtype(hidden, weight):
    """autocast's type where autocast is on and would cast these inputs, else the inputs' own."""
    device = hidden.device.type
    if hasattr(torch, "get_autocast_dtype"):  # torch 2.4 on
        enabled, dtype = torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)
    elif device == "cuda":
        enabled, dtype = torch.is_autocast_enabled(), torch.get_autocast_gpu_dtype()
    else:
        enabled, dtype = torch.is_autocast_cpu_enabled(), torch.get_autocast_cpu_dtype()
    if enabled and torch.float64 not in (hidden.dtype, weight.dtype):
        return dtype
    return torch.promote_types(hidden.dtype, weight.dtype)


class ChunkedLinearCrossEntropy(torch.autograd.Function):
    """ddpbench's fused output projection and loss (workloads/chunked_cross_entropy.cpp), step for
    step in PyTorch: forward takes one chunk's logits at a time, its share of the loss and, where a
    gradient is wanted, its gradients for the hidden states and the weight; backward only scales
    them. The [tokens, vocab] fp32 logits are never whole; the products see the weight padded with
    zero rows to a multiple of 64 (the padded logits -inf). Mean cross-entropy, fp32."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_rows):
        accumulate = torch.promote_types(hidden.dtype, torch.float32)
        rows, vocabulary = hidden.size(0), weight.size(0)
        padded = -(-vocabulary // 64) * 64
        dtype = _product_dtype(hidden, weight)
        with_gradients = hidden.requires_grad or weight.requires_grad
        with torch.autocast(hidden.device.type, enabled=False):
            product_weight = F.pad(weight.to(dtype), (0, 0, 0, padded - vocabulary))
            total = torch.zeros((), device=hidden.device, dtype=accumulate)
            grad_hidden = grad_weight = None
            if with_gradients:
                grad_hidden = torch.empty(hidden.shape, device=hidden.device, dtype=accumulate)
                grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=accumulate)
            for begin in range(0, rows, chunk_rows):
                n = min(chunk_rows, rows - begin)
                chunk, chosen = hidden[begin:begin + n].to(dtype), targets[begin:begin + n].unsqueeze(1)
                product = chunk @ product_weight.t()
                product[:, vocabulary:] = float("-inf")
                log_probabilities = torch.log_softmax(product, 1, dtype=accumulate)
                total -= log_probabilities.gather(1, chosen).sum()
                if not with_gradients:
                    continue
                probabilities = log_probabilities.exp_()
                probabilities.scatter_add_(1, chosen, torch.full((n, 1), -1.0, device=chunk.device, dtype=accumulate))
                grad_logits = probabilities.to(dtype)
                grad_hidden[begin:begin + n] = grad_logits @ product_weight
                grad_logits_t = grad_logits[:, :vocabulary].t()
                if dtype == accumulate:
                    grad_weight.addmm_(grad_logits_t, chunk)
                else:
                    grad_weight += grad_logits_t @ chunk
        ctx.grads = (grad_hidden, grad_weight, hidden.dtype, weight.dtype, rows)
        return total / rows

    @staticmethod
    def backward(ctx, grad_output):
        grad_hidden, grad_weight, hidden_dtype, weight_dtype, rows = ctx.grads
        scale = grad_output.to(grad_hidden.dtype) / rows
        return (grad_hidden * scale).to(hidden_dtype), (grad_weight * scale).to(weight_dtype), None, None


class Gpt2(nn.Module):
    """ddpbench's `gpt2`: GPT-2 small as nanoGPT writes it (SDPA, pre-LayerNorm, tied output).
    forward(tokens) gives the logits; forward(tokens, targets) the loss through
    ChunkedLinearCrossEntropy, ddpbench's default path (--gpt2-loss fused)."""

    def __init__(self):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(GPT2_VOCAB, GPT2_WIDTH), nn.Embedding(GPT2_CONTEXT, GPT2_WIDTH)
        self.blocks = nn.ModuleList(Gpt2Block() for _ in range(GPT2_LAYERS))
        self.ln_f = nn.LayerNorm(GPT2_WIDTH)

    def forward(self, tokens, targets=None):
        h = self.wte(tokens) + self.wpe(torch.arange(tokens.size(1), device=tokens.device)).unsqueeze(0)
        for block in self.blocks:
            h = checkpointed(block, h) if CHECKPOINT else block(h)
        if targets is not None:
            hidden = self.ln_f(h)
            return ChunkedLinearCrossEntropy.apply(hidden.reshape(-1, hidden.size(-1)), self.wte.weight,
                                                   targets.reshape(-1), GPT2_LOGITS_CHUNK_ROWS)
        return self.ln_f(h) @ self.wte.weight.t()


def workload(name, batch, device, seq_len=0):
    """(model on `device`, optimizer factory, inputs, targets, batch) of a workload; 32 batches of data."""
    if name == "mlp":
        batch = batch or 128
        model = CheckpointedSequential(nn.Sequential(nn.Linear(784, 1024), nn.ReLU()),
                                       nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()),
                                       nn.Sequential(nn.Linear(1024, 1024), nn.ReLU()), nn.Linear(1024, 10))
        inputs = torch.randn(32 * batch, 784)
        targets = torch.randint(0, 10, (32 * batch,))
        make_optimizer = lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)  # noqa: E731
    elif name == "gpt2":
        batch = batch or (16 if device.type == "cuda" else 2)
        seq = seq_len or (GPT2_CONTEXT if device.type == "cuda" else 32)
        model = Gpt2()
        tokens = torch.randint(0, GPT2_VOCAB, (32 * batch, seq + 1))
        inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        # PyTorch's default AdamW: multi-tensor (foreach) on CUDA.
        make_optimizer = lambda p: torch.optim.AdamW(p, lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1)  # noqa: E731
    else:
        batch = batch or 32
        model = CausalLM()
        tokens = torch.randint(0, VOCAB, (32 * batch, SEQUENCE + 1))
        inputs, targets = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
        make_optimizer = lambda p: torch.optim.AdamW(p, lr=1e-3)  # noqa: E731
    # The data stays on the host and each batch is copied over per step, as ddpbench's loader does.
    return model.to(device), make_optimizer, inputs, targets, batch


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", choices=["mlp", "transformer", "gpt2"], required=True)
    p.add_argument("--strategy", choices=["single", "ddp"], default="single")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=0, help="global batch (default: the workload's)")
    p.add_argument("--threads", type=int, default=0, help="intra-op threads (default: torch's)")
    p.add_argument("--seq-len", type=int, default=0, help="gpt2: tokens a sample (default: 1024 on CUDA, 32 on CPU)")
    p.add_argument("--gpt2-loss", choices=["plain", "fused"], default="plain",
                   help="gpt2: whole logits then the loss (nanoGPT's eager loop, default), or ddpbench's fused loss")
    p.add_argument("--activation-checkpointing", choices=["none", "full"], default="none",
                   help="full: every unit through torch.utils.checkpoint (non-reentrant)")
    p.add_argument("--peak", action="store_true",
                   help="one more step after the timed ones, its peak bytes as ddpbench counts them (benchmarks/heap_peak.py)")
    args = p.parse_args(argv)
    global CHECKPOINT
    CHECKPOINT = args.activation_checkpointing == "full"
    if args.dtype == "fp16" and args.device == "cpu":
        p.error("--dtype fp16 needs --device cuda")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.manual_seed(42)
    model, make_optimizer, inputs, targets, batch = workload(args.workload, args.batch, device, args.seq_len)
    if args.strategy == "ddp":
        import torch.distributed as dist
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(free_port()))
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[0] if device.type == "cuda" else None,
                                                    bucket_cap_mb=25)
    optimizer = make_optimizer(model.parameters())
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(args.dtype)
    scaler = torch.cuda.amp.GradScaler() if args.dtype == "fp16" else None
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []

    def step(i):
        b = i % 32
        x = inputs[b * batch:(b + 1) * batch].to(device, non_blocking=True)
        y = targets[b * batch:(b + 1) * batch].to(device, non_blocking=True)
        if args.workload == "gpt2" and args.gpt2_loss == "fused":
            with torch.autocast(device.type, dtype=low, enabled=low is not None):
                loss = model(x, y)
        else:
            with torch.autocast(device.type, dtype=low, enabled=low is not None):
                logits = model(x)
            loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))
        if scaler:
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        optimizer.zero_grad()

    for i in range(args.warmup + args.steps):
        sync()
        start = time.perf_counter()
        step(i)
        sync()
        if i >= args.warmup:
            times.append((time.perf_counter() - start) * 1e3)
    out = {"step_ms": times}
    if args.peak:
        from heap_peak import heap_counter, step_peak_bytes
        # Held before a step: the parameters, their gradients where zero_grad keeps them (torch 1.x
        # zeroes them; 2.x sets them to none) and the optimizer state, as ddpbench counts its peak.
        held = sum(t.numel() * t.element_size() for t in model.parameters())
        held += sum(t.grad.numel() * t.grad.element_size() for t in model.parameters() if t.grad is not None)
        held += sum(v.numel() * v.element_size() for st in optimizer.state.values() for v in st.values()
                    if torch.is_tensor(v) and v.dim() > 0)
        heap = heap_counter()
        out["peak_bytes"] = step_peak_bytes(lambda: step(args.warmup + args.steps), held, heap)
        out["peak_method"] = "heap counter" if heap is not None else "profiler"
    print(json.dumps(out))
    if args.strategy == "ddp":
        torch.distributed.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
