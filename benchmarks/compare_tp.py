#!/usr/bin/python3
"""ddpbench `tp` against PyTorch's DTensor tensor parallelism (`parallelize_module` with
ColwiseParallel and RowwiseParallel, benchmarks/python_tp_loop.py) on `mlp` or `transformer`, Gloo,
one thread per rank: the same plan (mlp: fc1 and fc3 by columns, fc2 and fc4 by rows; transformer:
attention by heads, the feed-forward by columns then rows, the embedding and head by vocabulary with
the loss on the split logits), the same global batch on every rank. Needs torch 2.4 or later: run it in the LibTorch 2.x leg (scripts/test-libtorch2.sh,
trixie's torch 2.6) with --build build-libtorch2. ddpbench's `ddp` runs beside them for reference.

With --mesh dp=D,tp=T both sides run on the 2-D mesh: ddpbench `tp --mesh`, the peer its plan over
each tp group and PyTorch's DDP over the dp groups (`_pre_dp_module_transform`), each dp group on its
share of the batch; `ddp` runs at world D x T beside them. With --mesh fsdp=F,tp=T the peer wraps
its parallelized model in FSDP2 (`fully_shard` over the fsdp groups, each of ddpbench's wrap units
its own) instead, torchtitan's FSDP x TP, and `fsdp` runs beside them; on that mesh no unit on
either side is resharded after its forward (--reshard-after-forward off), as the peer cannot be on
the CPU (python_tp_loop.py).

Rounds are interleaved (benchmarks/interleave.py), each run fresh rank processes; a run's figures
are rank 0's mean step time and its peak bytes (ddpbench: device 0's peak_allocated_bytes; the peer:
every thread's malloc counted by benchmarks/heap_counter.c, preloaded).

    benchmarks/compare_tp.py [--workload mlp|transformer] [--rounds 5] [--steps 20] [--warmup 5]
                             [--batch 128 for mlp, 32 for transformer] [--world 2 | --mesh dp=2,tp=2 | --mesh fsdp=2,tp=2]
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


def main():
    p = parser(__doc__, rounds=5, steps=20, batch=0)
    p.add_argument("--world", type=int, default=2, help="ranks (one thread each)")
    p.add_argument("--workload", choices=["mlp", "transformer"], default="mlp")
    p.add_argument("--mesh", default="", help="dp=D,tp=T or fsdp=F,tp=T: both sides on that 2-D mesh (world D x T)")
    args = p.parse_args()
    dp_size, dp_kind = 1, "dp"
    if args.mesh:
        try:
            sizes = dict(pair.split("=") for pair in args.mesh.split(","))
        except ValueError:
            sizes = {}
        if list(sizes) not in (["dp", "tp"], ["fsdp", "tp"]):
            p.error(f"--mesh: expected dp=D,tp=T or fsdp=F,tp=T, not {args.mesh}")
        dp_kind = list(sizes)[0]
        dp_size, args.world = int(sizes[dp_kind]), int(sizes[dp_kind]) * int(sizes["tp"])
    # On an fsdp mesh both sides keep each unit gathered from its forward to its backward: the peer
    # cannot reshard there (python_tp_loop.py says why).
    no_reshard = ["--reshard-after-forward", "off"] if dp_kind == "fsdp" else []
    args.batch = args.batch or (128 if args.workload == "mlp" else 32)
    peaks = {}

    def ddpbench(name, strategy):
        def run():
            on_mesh = ["--mesh", args.mesh] if args.mesh and strategy == "tp" else []
            if strategy in ("tp", "fsdp"):
                on_mesh += no_reshard
            c = ddpbench_case(args.build, ["--strategy", strategy, "--workload", args.workload, "--device", "cpu",
                                           "--world-size", str(args.world), "--threads", "1", *on_mesh,
                                           "--batch", str(args.batch), "--steps", str(args.steps),
                                           "--warmup", str(args.warmup)])
            if c["status"] != "ok":
                raise SystemExit(f"compare_tp: ddpbench {strategy}: {c['status']}: {c.get('reason')}")
            peaks.setdefault(name, []).append(c["memory"][0]["peak_allocated_bytes"])
            return statistics.fmean(c["step_times_ms"])
        return run

    heap_dir = tempfile.TemporaryDirectory()
    env, counter = peer_environment_counting_heap(heap_dir.name)

    def peer(name):
        def run():
            r = subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_tp_loop.py"),
                                str(args.steps), str(args.warmup), str(args.batch), "1", str(args.world),
                                args.workload, str(dp_size), dp_kind],
                               capture_output=True, text=True, env=env)
            if r.returncode != 0:
                raise SystemExit(f"compare_tp: the peer exited {r.returncode}: {r.stderr.strip()[-2000:]}")
            figures = json.loads(r.stdout.strip().splitlines()[-1])
            peaks.setdefault(name, []).append(figures["peak_bytes"])
            return statistics.fmean(figures["step_ms"])
        return run

    peer_name = "PyTorch DTensor (parallelize_module)" + (
        {"dp": " + DDP over dp", "fsdp": " + FSDP2 over fsdp"}[dp_kind] if args.mesh else "")
    tools = {
        "ddpbench tp": ddpbench("ddpbench tp", "tp"),
        peer_name: peer(peer_name),
        f"ddpbench {'fsdp' if dp_kind == 'fsdp' else 'ddp'}": ddpbench(
            f"ddpbench {'fsdp' if dp_kind == 'fsdp' else 'ddp'}", "fsdp" if dp_kind == "fsdp" else "ddp"),
    }
    samples = run_rounds(tools, args.rounds)
    base = "ddpbench tp"
    layout = (f"mesh {args.mesh} (world {args.world}, Gloo), global batch {args.batch} split over the {dp_kind} groups"
              + (", no unit resharded after forward" if no_reshard else "")
              if args.mesh else f"world {args.world} (Gloo), global batch {args.batch} on every rank (tp) or split (ddp)")
    report(args, samples, f"{args.workload}, {layout}, 1 thread per rank, {args.steps} steps after {args.warmup} "
           f"warm-up, {args.rounds} interleaved rounds", base, label="run")
    print()
    print_peak_table(peaks, tools, base, digits=2)
    print()
    print("ddpbench: device 0's peak_allocated_bytes (its counting allocator); the peer: "
          + ("benchmarks/heap_counter.c, every thread's malloc" if counter else "torch.profiler's memory events"))
    heap_dir.cleanup()
    add_to_json(args, peak_bytes=peaks)
    return 0


if __name__ == "__main__":
    sys.exit(main())
