#!/usr/bin/python3
"""ddpbench-project's pp checked against measurement on this machine: a pipeline measured at one
stage count, projected to others, and those measured.

Each round, for each schedule: pp at --from-world ranks (the base), then pp at each of --worlds,
all with the same workload, global batch and ddpbench's default micro-batches; the base projected
to every world (its own included: what the model makes of the case it starts from) on this host's
loopback, fitted from ddpbench-micro's Gloo all-reduce times as projection_validation.py fits it,
with this machine's cores as its compute slots. A case's error is the median over rounds of the
round's error (the base and the measured runs of a round back to back: this VM drifts between
minutes).

With --mesh dp (or fsdp) the targets are 2-D layouts instead (projection/mesh.py): at each world W
of --worlds, `dp=W/P,pp=P` with P the base's --from-world, projected from the base and measured as
`pp --mesh dp=W/P,pp=P` with W/P times the base's global batch (each pipeline on the base's batch,
as the projection's weak scaling has it).

    /usr/bin/python3 benchmarks/pp_projection_validation.py OUT_DIR [--workload mlp]
        [--schedules gpipe,1f1b] [--from-world 2] [--worlds 2,3,4] [--chunks 2] [--steps 20]
        [--repetitions 3] [--rounds 3] [--mesh dp|fsdp] [--build build]

Writes OUT_DIR/validation.json and OUT_DIR/validation.md, and keeps every results file it read.
interleaved-1f1b takes --chunks chunks a rank: its worlds need workloads of units enough (ranks x
chunks stages of a unit each; mlp's 4 units allow 2 ranks only).
"""
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.projection_validation import (by_round, loopback_network, median_case, resize_parser, run,  # noqa: E402
                                               write_validation)
from projection import model  # noqa: E402
from reports import results, stats  # noqa: E402


def main():
    p = resize_parser(__doc__, "2,3,4")
    p.add_argument("--schedules", default="gpipe,1f1b")
    p.add_argument("--chunks", type=int, default=2, help="chunks a rank under interleaved-1f1b (default 2)")
    p.add_argument("--mesh", choices=["dp", "fsdp"], help="project and measure 2-D layouts of this kind and pp")
    args = p.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    if args.mesh and any(w % args.from_world or w // args.from_world < 2 for w in worlds):
        p.error(f"--worlds: with --mesh each must be 2 or more times --from-world {args.from_world}")
    schedules = args.schedules.split(",")
    os.makedirs(args.out, exist_ok=True)
    exe = os.path.join(args.build, "ddpbench")

    loopback = loopback_network(args.build, args.out, max(worlds + [args.from_world]))

    def measure(schedule, world, round_, role, extra=()):
        path = os.path.join(args.out, f"{args.workload}-{schedule}-{role}-world{world}-round{round_}.json")
        chunks = ["--stages-per-rank", str(args.chunks)] if schedule == "interleaved-1f1b" else []
        run([exe, "--strategy", "pp", "--world-size", str(world), "--pp-schedule", schedule, *chunks, *extra,
             "--workload", args.workload, "--device", "cpu", "--threads", "1", "--steps", str(args.steps),
             "--warmup", "5", "--repetitions", str(args.repetitions), "--parity-steps", "0", "--json", path])
        return path

    samples = {}
    for round_ in range(args.rounds):
        for schedule in schedules:
            base_path = measure(schedule, args.from_world, round_, "base")
            (base,) = [c for c in model.measured_cases(results.load(base_path)) if c.strategy == "pp"]
            for world in worlds:
                extra = ()
                if args.mesh:
                    d = world // args.from_world
                    projected = model.Projector(loopback, "weak").project_pp_layout(base, world, args.from_world, args.mesh)
                    extra = ("--mesh", f"{args.mesh}={d},pp={args.from_world}", "--batch", str(d * base.global_batch))
                else:
                    projected = model.Projector(loopback, "weak").project(base, "pp", world)
                if projected.status != "projected":
                    raise SystemExit(f"pp_projection_validation: {schedule} at {world}: {projected.reason}")
                _, measured = median_case(measure(schedule, world, round_, "measured", extra), "pp")
                s = samples.setdefault((schedule, world), {"predicted_ms": [], "measured_ms": [], "errors": [],
                                                           "exposed_predicted_ms": [], "bubble_measured": []})
                s["predicted_ms"].append(projected.step_ms)
                s["measured_ms"].append(measured["real_time"])
                s["errors"].append(projected.step_ms / measured["real_time"] - 1)
                s["exposed_predicted_ms"].append(projected.exposed_comm_ms)
                print(f"round {round_} {args.workload}/pp {schedule} {args.from_world} -> {projected.strategy} {world}: predicted "
                      f"{projected.step_ms:.2f} ms, measured {measured['real_time']:.2f} ms, "
                      f"error {s['errors'][-1] * 100:+.1f}%", flush=True)

    rows = [{"schedule": schedule, "from_world": args.from_world, "world": world, "rounds": len(s["errors"]),
             "error": stats.median(s["errors"]), "round_errors": s["errors"],
             "predicted_ms": stats.median(s["predicted_ms"]), "measured_ms": stats.median(s["measured_ms"]),
             "exposed_predicted_ms": stats.median(s["exposed_predicted_ms"])}
            for (schedule, world), s in samples.items()]
    write_validation(args, loopback, rows,
                     ["schedule", "from", "to", "error (median of rounds)", "by round",
                      "predicted / measured ms (medians)", "hops' share predicted, ms"],
                     lambda r: [r["schedule"], str(r["from_world"]), str(r["world"]), f"{r['error'] * 100:+.1f}%",
                                by_round(r["round_errors"]), f"{r['predicted_ms']:.2f} / {r['measured_ms']:.2f}",
                                f"{r['exposed_predicted_ms']:.2f}"],
                     args.workload + (f" to {args.mesh}=W/P,pp=P" if args.mesh else ""))


if __name__ == "__main__":
    main()
