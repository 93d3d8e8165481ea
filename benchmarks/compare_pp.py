#!/usr/bin/python3
"""ddpbench `pp` against PyTorch's torch.distributed.pipelining (benchmarks/python_pp_loop.py) on
`mlp`, Gloo, one thread per rank: the same stages (mlp's four layers cut evenly, ddpbench told so
with --pp-split), schedules (GPipe and 1F1B), micro-batches and global batch. Needs torch 2.4 or
later: run it in the LibTorch 2.x leg (scripts/test-libtorch2.sh, trixie's torch 2.6) with --build
build-libtorch2.

torch 2.6's Schedule1F1B hangs over Gloo (pytorch#132644; python_pp_loop.py says why): the peer runs
with upstream's fix applied in the script (--wait-all-p2p). --peer-as-shipped runs it without,
each run stopped after --peer-timeout seconds and reported as hung.

With --dp D the ranks are the 2-D mesh dp=D,pp=WORLD/D: ddpbench `pp --mesh dp=D,pp=P`, and the
peer's stages each wrapped in PyTorch's DDP over their dp group (python_pp_loop.py --dp), the
composition torchtitan runs; --microbatches then counts a pipeline's share of the batch. With
--dp-kind fsdp the mesh is fsdp=D,pp=P: ddpbench `pp --mesh fsdp=D,pp=P`, and the peer's stages each
one FSDP2 unit (fully_shard, reshard_after_forward=False) over their fsdp group.

Rounds are interleaved (benchmarks/interleave.py), each run fresh rank processes; a run's figures
are rank 0's mean step time and its peak bytes (ddpbench: device 0's peak_allocated_bytes; the peer:
every thread's malloc counted by benchmarks/heap_counter.c, preloaded).

    benchmarks/compare_pp.py [--rounds 5] [--steps 20] [--warmup 5] [--batch 128] [--world 2] [--microbatches 4]
                             [--dp D] [--dp-kind dp|fsdp]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.interleave import add_to_json, ddpbench_case, parser, peer_environment_counting_heap, report, run_rounds  # noqa: E402
from projection.pipeline import even_split  # noqa: E402


def main():
    p = parser(__doc__, rounds=5, steps=20, batch=128)
    p.add_argument("--world", type=int, default=2, help="ranks (one thread each), a stage each")
    p.add_argument("--microbatches", type=int, default=4)
    p.add_argument("--peer-as-shipped", action="store_true", help="the peer without upstream's fix of its p2p waits")
    p.add_argument("--peer-timeout", type=float, default=120, help="seconds before a peer run counts as hung")
    p.add_argument("--dp", type=int, default=1, help="pipelines (the mesh dp=D,pp=WORLD/D); 1: one pipeline of --world")
    p.add_argument("--dp-kind", choices=["dp", "fsdp"], default="dp",
                   help="how the pipelines share the work: dp (gradients all-reduced) or fsdp (stages sharded)")
    args = p.parse_args()
    if args.dp < 1 or args.world % args.dp != 0 or args.world // args.dp < 2:
        p.error(f"--dp: {args.dp} does not divide --world {args.world} into pipelines of 2 stages or more")
    stages = args.world // args.dp
    # ddpbench's even cut of mlp's four units, given to both sides by hand (where each stage after the first begins)
    cuts = ",".join(str(begin) for begin, _ in even_split(4, stages)[1:])
    layout = ["--world-size", str(args.world)] if args.dp == 1 else ["--mesh", f"{args.dp_kind}={args.dp},pp={stages}"]
    peaks = {}
    hung = {}

    def ddpbench(name, schedule):
        def run():
            c = ddpbench_case(args.build, ["--strategy", "pp", "--workload", "mlp", "--device", "cpu"] + layout + [
                                           "--threads", "1",
                                           "--batch", str(args.batch), "--steps", str(args.steps),
                                           "--warmup", str(args.warmup), "--pp-schedule", schedule,
                                           "--microbatches", str(args.microbatches), "--pp-split", cuts])
            if c["status"] != "ok":
                raise SystemExit(f"compare_pp: ddpbench {schedule}: {c['status']}: {c.get('reason')}")
            peaks.setdefault(name, []).append(c["memory"][0]["peak_allocated_bytes"])
            return statistics.fmean(c["step_times_ms"])
        return run

    heap_dir = tempfile.TemporaryDirectory()
    env, counter = peer_environment_counting_heap(heap_dir.name)

    def peer(name, schedule):
        def run():
            cmd = ["/usr/bin/python3", os.path.join(ROOT, "benchmarks", "python_pp_loop.py"), str(args.steps),
                   str(args.warmup), str(args.batch), "1", str(args.world), schedule, str(args.microbatches), cuts]
            if not args.peer_as_shipped:
                cmd.append("--wait-all-p2p")
            if args.dp > 1:
                cmd += ["--dp", str(args.dp), "--dp-kind", args.dp_kind]
            try:
                out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env, timeout=args.peer_timeout,
                                     start_new_session=True).stdout
            except subprocess.TimeoutExpired:
                hung[name] = hung.get(name, 0) + 1
                subprocess.run(["pkill", "-KILL", "-f", "python_pp_loop.py"], check=False)
                return float("nan")
            figures = json.loads(out.strip().splitlines()[-1])
            peaks.setdefault(name, []).append(figures["peak_bytes"])
            return statistics.fmean(figures["step_ms"])
        return run

    fix = "as shipped" if args.peer_as_shipped else "with #152938's wait"
    tools = {
        "ddpbench pp 1f1b": ddpbench("ddpbench pp 1f1b", "1f1b"),
        f"PyTorch Schedule1F1B ({fix})": peer(f"PyTorch Schedule1F1B ({fix})", "1f1b"),
        "ddpbench pp gpipe": ddpbench("ddpbench pp gpipe", "gpipe"),
        f"PyTorch ScheduleGPipe ({fix})": peer(f"PyTorch ScheduleGPipe ({fix})", "gpipe"),
    }
    samples = run_rounds(tools, args.rounds)
    for name, count in hung.items():
        print(f"{name}: hung in {count} of {args.rounds} rounds (stopped after {args.peer_timeout:g} s)")
    samples = {n: v for n, v in samples.items() if not any(x != x for x in v)}
    base = "ddpbench pp 1f1b"
    shape = f"{stages} stages" if args.dp == 1 else f"the mesh {args.dp_kind}={args.dp},pp={stages} (pipelines of {stages} stages)"
    report(args, samples, f"mlp, {shape} (Gloo), cut at layer(s) {cuts}, global batch {args.batch}, "
           f"{args.microbatches} micro-batches, 1 thread per rank, {args.steps} steps after {args.warmup} warm-up, "
           f"{args.rounds} interleaved rounds", base, label="run")
    print()
    print("| run | peak on rank 0 (first stage), MiB (median) | this one's / ddpbench's, same schedule |")
    print("|---|---|---|")
    med = {n: statistics.median(v) for n, v in peaks.items()}
    for n in med:
        pair = "ddpbench pp 1f1b" if "1F1B" in n or "1f1b" in n else "ddpbench pp gpipe"
        print(f"| {n} | {med[n] / 2 ** 20:.2f} | {med[n] / med[pair]:.3f}x |" if pair in med else f"| {n} | {med[n] / 2 ** 20:.2f} | |")
    print()
    print("ddpbench: device 0's peak_allocated_bytes (its counting allocator); the peer: "
          + ("benchmarks/heap_counter.c, every thread's malloc" if counter else "torch.profiler's memory events"))
    heap_dir.cleanup()
    add_to_json(args, peak_bytes=peaks, hung_rounds=hung)
    return 0


if __name__ == "__main__":
    sys.exit(main())
