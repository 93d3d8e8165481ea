#!/usr/bin/python3
"""ddpbench-project's tp checked against measurement on this machine: tp measured at one group size
(beside single, which tp's projection needs), projected to others, and those measured.

Each round: `single,tp` at --from-world ranks (the base), then tp at each of --worlds, all with the
same workload and global batch (every tp rank computes the whole batch); the base projected to
every world (its own included: what the model makes of the case it starts from) on this host's
loopback, fitted from ddpbench-micro's Gloo all-reduce times as projection_validation.py fits it,
with this machine's cores as its compute slots. A case's error is the median over rounds of the
round's error (the base and the measured runs of a round back to back: this VM drifts between
minutes). --sequence-parallel runs and projects tp with it.

With --mesh dp (or fsdp) the targets are 2-D layouts instead (projection/mesh.py): at each world W
of --worlds, `dp=W/T,tp=T` with T the base's --from-world, projected from the base and measured
as `tp --mesh dp=W/T,tp=T` with W/T times the base's global batch (each dp group on the base's
batch, as the projection's weak scaling has it).

    /usr/bin/python3 benchmarks/tp_projection_validation.py OUT_DIR [--workload mlp] [--from-world 2]
        [--worlds 2,4] [--steps 20] [--repetitions 3] [--rounds 3] [--sequence-parallel]
        [--mesh dp|fsdp] [--build build]

Writes OUT_DIR/validation.json and OUT_DIR/validation.md, and keeps every results file it read.
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
    p = resize_parser(__doc__, "2,4")
    p.add_argument("--sequence-parallel", action="store_true")
    p.add_argument("--mesh", choices=["dp", "fsdp"], help="project and measure 2-D layouts of this kind and tp")
    args = p.parse_args()
    worlds = [int(w) for w in args.worlds.split(",")]
    if args.mesh and any(w % args.from_world or w // args.from_world < 2 for w in worlds):
        p.error(f"--worlds: with --mesh each must be 2 or more times --from-world {args.from_world}")
    os.makedirs(args.out, exist_ok=True)
    exe = os.path.join(args.build, "ddpbench")
    flags = ["--sequence-parallel"] if args.sequence_parallel else []

    loopback = loopback_network(args.build, args.out, max(worlds + [args.from_world]))

    def measure(strategies, world, round_, role, extra=()):
        path = os.path.join(args.out, f"{args.workload}-tp-{role}-world{world}-round{round_}.json")
        run([exe, "--strategy", strategies, "--world-size", str(world), *flags, *extra, "--workload", args.workload,
             "--device", "cpu", "--threads", "1", "--steps", str(args.steps), "--warmup", "5",
             "--repetitions", str(args.repetitions), "--parity-steps", "0", "--json", path])
        return path

    samples = {}
    for round_ in range(args.rounds):
        base_doc = results.load(measure("single,tp", args.from_world, round_, "base"))
        cases = model.measured_cases(base_doc)
        (base,) = [c for c in cases if c.strategy == "tp"]
        (single,) = [c for c in cases if c.strategy == "single"]
        projector = model.Projector(loopback, "weak")
        projector.singles[args.workload] = single
        for world in worlds:
            extra = ()
            if args.mesh:
                d = world // args.from_world
                projected = projector.project_layout(base, world, args.from_world, args.mesh)
                extra = ("--mesh", f"{args.mesh}={d},tp={args.from_world}", "--batch", str(d * base.global_batch))
            else:
                projected = projector.project(base, "tp", world)
            if projected.status != "projected":
                raise SystemExit(f"tp_projection_validation: {args.from_world} -> {world}: {projected.reason}")
            _, measured = median_case(measure("tp", world, round_, "measured", extra), "tp")
            s = samples.setdefault(world, {"predicted_ms": [], "measured_ms": [], "errors": [],
                                           "exposed_predicted_ms": [], "exposed_measured_ms": []})
            s["predicted_ms"].append(projected.step_ms)
            s["measured_ms"].append(measured["real_time"])
            s["errors"].append(projected.step_ms / measured["real_time"] - 1)
            s["exposed_predicted_ms"].append(projected.exposed_comm_ms)
            s["exposed_measured_ms"].append(measured["ddpbench"]["phases_ms"].get("comm_exposed", 0.0))
            print(f"round {round_} {args.workload}/tp {args.from_world} -> {projected.strategy} {world}: predicted "
                  f"{projected.step_ms:.2f} ms, measured {measured['real_time']:.2f} ms, "
                  f"error {s['errors'][-1] * 100:+.1f}%", flush=True)

    rows = [{"from_world": args.from_world, "world": world, "rounds": len(s["errors"]),
             "error": stats.median(s["errors"]), "round_errors": s["errors"],
             "predicted_ms": stats.median(s["predicted_ms"]), "measured_ms": stats.median(s["measured_ms"]),
             "exposed_predicted_ms": stats.median(s["exposed_predicted_ms"]),
             "exposed_measured_ms": stats.median(s["exposed_measured_ms"])}
            for world, s in samples.items()]
    mode = (" --sequence-parallel" if args.sequence_parallel else "") + (f" to {args.mesh}=W/T,tp=T" if args.mesh else "")
    write_validation(args, loopback, rows,
                     ["from", "to", "error (median of rounds)", "by round", "predicted / measured ms (medians)",
                      "communication predicted / measured, ms"],
                     lambda r: [str(r["from_world"]), str(r["world"]), f"{r['error'] * 100:+.1f}%",
                                by_round(r["round_errors"]), f"{r['predicted_ms']:.2f} / {r['measured_ms']:.2f}",
                                f"{r['exposed_predicted_ms']:.2f} / {r['exposed_measured_ms']:.2f}"],
                     f"{args.workload}/tp{mode}")


if __name__ == "__main__":
    main()
