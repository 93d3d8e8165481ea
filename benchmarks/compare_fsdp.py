#!/usr/bin/python3
"""ddpbench `fsdp` against PyTorch's FSDP2 (`fully_shard`, benchmarks/python_fsdp_loop.py) on `mlp`,
Gloo, one thread per rank, the same per-rank batch, each Linear its own unit. Needs torch 2.4 or
later: run it in the LibTorch 2.x leg (scripts/test-libtorch2.sh, trixie's torch 2.6) with --build
build-libtorch2.

Both resharding choices are compared where the peer can run them: torch 2.6's FSDP2 on the CPU
fails autograd's version check on any unit it reshards after forward (every unit but the last
is thus left gathered on its side, TorchTitan's choice for the last block, and ddpbench's
`--reshard-after-forward off` is the like-for-like pair); ddpbench's default (`on`) runs for
reference. Both set gradients to none between steps (PyTorch 2's zero_grad() default; ddpbench's
fsdp frees its gradient chunks as each step begins, docs/how-it-measures.md); the peer's
--keep-grads (set_to_none=False) is there to run by hand.

Rounds are interleaved (benchmarks/interleave.py), each run fresh rank processes; a run's figures
are rank 0's mean step time and its peak bytes (ddpbench: device 0's peak_allocated_bytes; the peer:
every thread's malloc counted by benchmarks/heap_counter.c, preloaded).

    benchmarks/compare_fsdp.py [--rounds 5] [--steps 20] [--warmup 5] [--batch 128] [--world 2]
"""
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import add_to_json, ddpbench_case, parser, print_peak_table, peer_environment_counting_heap, report, run_rounds  # noqa: E402

import json  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402


def main():
    p = parser(__doc__, rounds=5, steps=20, batch=128)
    p.add_argument("--world", type=int, default=2, help="ranks (one thread each)")
    args = p.parse_args()
    peaks = {}

    def ddpbench(name, strategy, extra=()):
        def run():
            c = ddpbench_case(args.build, ["--strategy", strategy, "--workload", "mlp", "--device", "cpu",
                                           "--world-size", str(args.world), "--threads", "1",
                                           "--batch", str(args.batch), "--steps", str(args.steps),
                                           "--warmup", str(args.warmup)] + list(extra))
            peaks.setdefault(name, []).append(c["memory"][0]["peak_allocated_bytes"])
            return statistics.fmean(c["step_times_ms"])
        return run

    heap_dir = tempfile.TemporaryDirectory()
    env, counter = peer_environment_counting_heap(heap_dir.name)
    if not counter:
        print("compare_fsdp: no C compiler (cc) to build benchmarks/heap_counter.c: the peer's peak comes from "
              "torch.profiler's memory events, which are no exact peak (python_fsdp_loop.py)", file=sys.stderr)
    between = {}

    def peer(name, flags):
        def run():
            out = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_fsdp_loop.py"),
                                  str(args.steps), str(args.warmup), str(args.batch), "1", str(args.world)] + flags,
                                 check=True, capture_output=True, text=True, env=env).stdout
            figures = json.loads(out.strip().splitlines()[-1])
            peaks.setdefault(name, []).append(figures["peak_bytes"])
            if figures.get("between_steps_bytes") is not None:
                between.setdefault(name, []).append((figures["between_steps_bytes"], figures["held_bytes"]))
            return statistics.fmean(figures["step_ms"])
        return run

    tools = {
        "ddpbench fsdp, reshard off": ddpbench("ddpbench fsdp, reshard off", "fsdp", ["--reshard-after-forward", "off"]),
        "PyTorch FSDP2, reshard off": peer("PyTorch FSDP2, reshard off", ["--no-reshard"]),
        "ddpbench fsdp, reshard on (default)": ddpbench("ddpbench fsdp, reshard on (default)", "fsdp"),
        "ddpbench ddp": ddpbench("ddpbench ddp", "ddp"),
    }
    samples = run_rounds(tools, args.rounds)
    base = "ddpbench fsdp, reshard off"
    report(args, samples, f"mlp, world {args.world} (Gloo), global batch {args.batch}, 1 thread per rank, "
           f"{args.steps} steps after {args.warmup} warm-up, {args.rounds} interleaved rounds", base, label="run")
    print()
    print_peak_table(peaks, tools, base)
    print()
    print("ddpbench: device 0's peak_allocated_bytes (its counting allocator); the peer: "
          + ("benchmarks/heap_counter.c, every thread's malloc" if counter else "torch.profiler's memory events"))
    for n, pairs in between.items():
        extra = max(b - h for b, h in pairs)
        print(f"{n}: between steps rank 0 holds at most {extra / 2 ** 20:+.2f} MiB beyond its shards, gradients and "
              f"optimizer state (all it allocated since before the model was built)")
    heap_dir.cleanup()
    add_to_json(args, peak_bytes=peaks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
