#!/usr/bin/env python3
"""gpt2's output projection and loss alone, forward and backward, by three paths at gpt2's geometry
(16 x 1024 tokens of width 768, 50257 words; bf16 autocast on CUDA), to tell what the loss costs in a
step from what the rest of ddpbench's harness does:

  plain      the whole logits, then cross-entropy (nanoGPT's eager loop, PyTorch's peer by default)
  fused      ddpbench's fused loss as it is now (python_train_loop.ChunkedLinearCrossEntropy, the port
             of workloads/chunked_cross_entropy.cpp): each chunk's gradients taken in forward
  recompute  the fused loss as it was until 2026-11-27: forward keeps each token's log-sum-exp,
             backward recomputes each chunk's logits (the "before", kept here to measure the change)

For each: the median of the timed repetitions (wall time of a forward and backward, the GPU waited for
at its end by the loss's .item()), the peak memory it added, and
with --kernels the GPU kernels that took most of its time (torch.profiler).

    benchmarks/gpt2_loss_paths.py [--device cuda] [--tokens 16384] [--width 768] [--vocab 50257]
                                  [--repetitions 10] [--warmup 3] [--kernels 8] [--json FILE]
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from python_train_loop import GPT2_LOGITS_CHUNK_ROWS, ChunkedLinearCrossEntropy  # noqa: E402


class RecomputingChunkedLinearCrossEntropy(torch.autograd.Function):
    """The fused loss before 2026-11-27: backward recomputes each chunk's logits."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_rows):
        accumulate = torch.promote_types(hidden.dtype, torch.float32)
        rows = hidden.size(0)
        log_sum_exp = torch.empty(rows, device=hidden.device, dtype=accumulate)
        total = torch.zeros((), device=hidden.device, dtype=accumulate)
        product_dtype = hidden.dtype
        for begin in range(0, rows, chunk_rows):
            n = min(chunk_rows, rows - begin)
            product = hidden[begin:begin + n] @ weight.t()
            product_dtype = product.dtype
            logits = product.to(accumulate)
            lse = logits.logsumexp(1)
            total += (lse - logits.gather(1, targets[begin:begin + n].unsqueeze(1)).squeeze(1)).sum()
            log_sum_exp[begin:begin + n] = lse
        ctx.save_for_backward(hidden, weight, targets, log_sum_exp)
        ctx.chunk_rows, ctx.product_dtype = chunk_rows, product_dtype
        return total / rows

    @staticmethod
    def backward(ctx, grad_output):
        hidden, weight, targets, log_sum_exp = ctx.saved_tensors
        rows, accumulate = hidden.size(0), log_sum_exp.dtype
        scale = grad_output.to(accumulate) / rows
        w = weight.to(ctx.product_dtype)
        grad_hidden = torch.empty_like(hidden)
        grad_weight = torch.zeros(weight.shape, device=weight.device, dtype=accumulate)
        for begin in range(0, rows, ctx.chunk_rows):
            n = min(ctx.chunk_rows, rows - begin)
            h = hidden[begin:begin + n].to(ctx.product_dtype)
            p = ((h @ w.t()).to(accumulate) - log_sum_exp[begin:begin + n].unsqueeze(1)).exp_()
            p.scatter_add_(1, targets[begin:begin + n].unsqueeze(1), torch.full((n, 1), -1.0, device=h.device, dtype=accumulate))
            g = (p * scale).to(ctx.product_dtype)
            grad_hidden[begin:begin + n] = g @ w
            grad_weight += (g.t() @ h).to(accumulate)
        return grad_hidden, grad_weight.to(weight.dtype), None, None


PATHS = {
    "plain": lambda h, w, t, rows: F.cross_entropy(h @ w.t(), t),
    "fused": lambda h, w, t, rows: ChunkedLinearCrossEntropy.apply(h, w, t, rows),
    "recompute": lambda h, w, t, rows: RecomputingChunkedLinearCrossEntropy.apply(h, w, t, rows),
}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--tokens", type=int, default=16 * 1024)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--vocab", type=int, default=50257)
    p.add_argument("--chunk-rows", type=int, default=0, help="rows a chunk (default: ddpbench's gpt2's, 256 MiB of fp32 logits)")
    p.add_argument("--repetitions", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--kernels", type=int, default=0, help="list the N GPU kernels that took most of each path's time")
    p.add_argument("--json")
    args = p.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpt2_loss_paths.py: --device cuda, but this torch sees no GPU")
    rows = args.chunk_rows or max(1, (256 << 20) // (args.vocab * 4))
    gen = torch.Generator(device="cpu").manual_seed(0)
    hidden = torch.randn(args.tokens, args.width, generator=gen).to(device).requires_grad_()
    weight = (torch.randn(args.vocab, args.width, generator=gen) * 0.02).to(device).requires_grad_()
    targets = torch.randint(0, args.vocab, (args.tokens,), generator=gen).to(device)
    dtype = torch.bfloat16

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize()

    def once(path):
        hidden.grad = weight.grad = None
        with torch.autocast(device.type, dtype=dtype):
            loss = PATHS[path](hidden, weight, targets, rows)
        loss.backward()
        return loss

    results, losses = {}, {}
    for path in PATHS:
        for _ in range(args.warmup):
            once(path)
        sync()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
            base = torch.cuda.memory_allocated()
        times = []
        for _ in range(args.repetitions):
            sync()
            start = time.perf_counter()
            losses[path] = once(path).item()  # .item() waits for the GPU
            times.append((time.perf_counter() - start) * 1e3)
        peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device.type == "cuda" else None
        results[path] = {"median_ms": statistics.median(times), "min_ms": min(times), "max_ms": max(times),
                         "peak_added_mib": peak, "loss": losses[path],
                         "grad_hidden_norm": hidden.grad.norm().item(), "grad_weight_norm": weight.grad.norm().item()}
        if args.kernels and device.type == "cuda":
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                once(path)
                sync()
            events = sorted(prof.key_averages(), key=lambda e: getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)), reverse=True)
            results[path]["kernels"] = [{"name": e.key[:120], "calls": e.count,
                                         "ms": getattr(e, "device_time_total", getattr(e, "cuda_time_total", 0)) / 1e3}
                                        for e in events[:args.kernels]]
    print(f"gpt2's output projection and loss, forward and backward: {args.tokens} tokens x width {args.width}, "
          f"{args.vocab} words, bf16 autocast on {device.type}, chunks of {rows} rows; median of {args.repetitions}")
    print("| path | median ms | min..max | peak added MiB | loss | |grad hidden| | |grad weight| |")
    print("|---|---:|---|---:|---:|---:|---:|")
    for path, r in results.items():
        peak = "-" if r["peak_added_mib"] is None else f"{r['peak_added_mib']:.0f}"
        print(f"| {path} | {r['median_ms']:.2f} | {r['min_ms']:.2f}..{r['max_ms']:.2f} | {peak} | {r['loss']:.5f} | "
              f"{r['grad_hidden_norm']:.4e} | {r['grad_weight_norm']:.4e} |")
    for path, r in results.items():
        for k in r.get("kernels", []):
            print(f"  {path}: {k['ms']:8.2f} ms  {k['calls']:4d}x  {k['name']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"tokens": args.tokens, "width": args.width, "vocab": args.vocab, "chunk_rows": rows,
                       "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
                       "torch": torch.__version__, "paths": results}, f, indent=1)


if __name__ == "__main__":
    main()
