#!/usr/bin/python3
"""ddpbench `ddp --grad-accum K` against PyTorch DDP's own accumulation (the first K - 1
micro-batches under `no_sync()`, benchmarks/python_ddp_loop.py --grad-accum=K) on `mlp`, world 2,
Gloo, one thread per rank, the same per-rank batch cut into the same K micro-batches. Both reduce
once a step, after the last micro-batch's backward; the ratio measures what each pays around that.

Also in the same rounds: both without accumulation (K = 1), and ddpbench's
`--sync-every-microbatch` (an all-reduce after every micro-batch: what `no_sync` saves).

Rounds are interleaved (benchmarks/interleave.py), each run fresh rank processes; a run's figures
are rank 0's mean step time and its peak bytes (ddpbench: device 0's peak_allocated_bytes; the peer:
all it held since before the model plus one more step's most on top, counted by
benchmarks/heap_counter.c, preloaded: so this comparison needs a C compiler).

    benchmarks/compare_grad_accum.py [--rounds 5] [--steps 20] [--warmup 5] [--batch 128] [--grad-accum 4]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import add_to_json, ddpbench_case, parser, print_peak_table, peer_environment_counting_heap, report, run_rounds  # noqa: E402

WORLD = 2


def main():
    p = parser(__doc__, rounds=5, steps=20, batch=128)
    p.add_argument("--grad-accum", type=int, default=4, help="micro-batches a step (K)")
    args = p.parse_args()
    k = args.grad_accum
    if k < 2 or (args.batch // WORLD) % k:
        print(f"compare_grad_accum: --grad-accum {k} must be at least 2 and divide a rank's {args.batch // WORLD} rows",
              file=sys.stderr)
        return 2
    heap_dir = tempfile.TemporaryDirectory()
    env, counter = peer_environment_counting_heap(heap_dir.name)
    if not counter:
        print("compare_grad_accum: no C compiler (cc) to build benchmarks/heap_counter.c, which the peer's peak needs",
              file=sys.stderr)
        return 2
    peaks = {}

    def ddpbench(name, extra):
        def run():
            c = ddpbench_case(args.build, ["--strategy", "ddp", "--workload", "mlp", "--device", "cpu",
                                           "--world-size", str(WORLD), "--threads", "1", "--batch", str(args.batch),
                                           "--steps", str(args.steps), "--warmup", str(args.warmup)] + extra)
            peaks.setdefault(name, []).append(c["memory"][0]["peak_allocated_bytes"])
            return statistics.fmean(c["step_times_ms"])
        return run

    def peer(name, micro_batches):
        def run():
            done = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_ddp_loop.py"),
                                   str(args.steps), str(args.warmup), str(args.batch), "1", str(WORLD), "25", "sgd",
                                   f"--grad-accum={micro_batches}", "--peak"], capture_output=True, text=True, env=env)
            if done.returncode != 0:
                raise RuntimeError(f"python_ddp_loop.py exited {done.returncode}:\n{done.stderr[-3000:]}")
            figures = json.loads(done.stdout.strip().splitlines()[-1])
            peaks.setdefault(name, []).append(figures["peak_bytes"])
            return statistics.fmean(figures["step_ms"])
        return run

    base, peer_k = f"ddpbench ddp --grad-accum {k}", f"PyTorch DDP, no_sync x {k}"
    tools = {
        base: ddpbench(base, ["--grad-accum", str(k)]),
        peer_k: peer(peer_k, k),
        "ddpbench ddp": ddpbench("ddpbench ddp", []),
        "PyTorch DDP": peer("PyTorch DDP", 1),
        f"ddpbench ddp --grad-accum {k} --sync-every-microbatch":
            ddpbench(f"ddpbench ddp --grad-accum {k} --sync-every-microbatch",
                     ["--grad-accum", str(k), "--sync-every-microbatch"]),
    }
    samples = run_rounds(tools, args.rounds)
    report(args, samples, f"mlp, world {WORLD} (Gloo), global batch {args.batch} in {k} micro-batches, 1 thread per rank, "
           f"{args.steps} steps after {args.warmup} warm-up, {args.rounds} interleaved rounds", base, label="run")
    print()
    print_peak_table(peaks, tools, base)
    print()
    print("ddpbench: device 0's peak_allocated_bytes (its counting allocator); the peer: benchmarks/heap_counter.c, "
          "every thread's malloc since before the model was built")
    heap_dir.cleanup()
    add_to_json(args, peak_bytes=peaks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
