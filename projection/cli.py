"""Project what ddpbench measured onto world sizes and networks it did not run on.

    ddpbench-project RESULTS.json [--world 8,64,512] [--gpus-per-node 8]
                     [--network nvlink4+ndr400 | --network FILE] [--scaling weak|strong]
                     [--link-run RUN.json] [--strategy LIST] [--device-memory 80GiB] [--json OUT.json]
                     [--chart OUT.png] [--checkpointed RUN.json] [--seq-len TOKENS]

For every measured workload: the predicted step time, throughput and scaling efficiency of ddp
(the measured bucket timeline replayed against the network's all-reduce cost), dp (one node),
hogwild (one node), zero1, zero2 and fsdp where the file measured them (reduce-scatter and
all-gather costs), and pp where it measured it (its chain cut again for each world's stages from
the case's own unit times, the schedule's fill and drain, the hops between stages), and tp where it
measured it beside single (the share of compute its split divides, its all-reduces over the group)
and with it every 2-D layout dp=D,tp=T and fsdp=D,tp=T of each world (tp inside a node, ddp's
all-reduce or fsdp's gathers across),
with the memory per device of ddp, the sharded three (ZeRO's formulas plus the measured rest), pp
(its largest stage plus stage 0's activations), tp (its share of the parameters plus the
measured rest) and the layouts (tp's, plus ddp's copy of the gradients, or fsdp's shares), the
activations per device of ddp and the sharded three (a line fitted to the file's measured
activations against the micro-batch), and every assumption printed next to the numbers.
--device-memory answers, at each world size, which of them fit in that much a device and which of
those is fastest, and where one does not, the --grad-accum K (or, given --checkpointed, a ddpbench
run of the same workloads under --activation-checkpointing, the checkpointing) that would make it
fit. --seq-len reads a sequence model's cases at another number of tokens a sample, from the
workload facts the file records (attention's FLOPs and kept scores growing as the square of the
tokens, the rest linearly). FILE is a network
description, ddpbench-micro's JSON or nccl-tests' all_reduce_perf output (alpha and bandwidth
fitted). RUN.json, a ddpbench run of ddp, zero1 or zero2 across two nodes or more of the target
network, widens the inter-node link's efficiency range to what its large collectives reached over
it. docs/projection.md has the model and where it is known to be wrong.
"""
import argparse
import json
import math
import os
import sys

from projection import answers, link_run, model, network
from reports import files, projection_file, results
from reports.args import EXIT_BAD_INPUT, OneLineParser
SCHEMA_VERSION = projection_file.SCHEMA_VERSION  # what the report reads back (reports/projection_file.py)


def _worlds(text):
    try:
        worlds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of whole numbers like 8,64,512")
    if not worlds or any(w < 1 or w > 1 << 20 for w in worlds):
        raise argparse.ArgumentTypeError(f"{text!r}: world sizes are from 1 to {1 << 20}")
    twice = sorted({w for w in worlds if worlds.count(w) > 1})
    if twice:
        raise argparse.ArgumentTypeError(f"{text!r}: {', '.join(map(str, twice))} given twice (each world is one row)")
    return worlds


def _positive(text):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number")
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is below 1")
    return v


UNITS = {"b": 1, "k": 2 ** 10, "kib": 2 ** 10, "m": 2 ** 20, "mib": 2 ** 20, "g": 2 ** 30, "gib": 2 ** 30,
         "t": 2 ** 40, "tib": 2 ** 40, "kb": 1e3, "mb": 1e6, "gb": 1e9, "tb": 1e12}


def _bytes(text):
    """80GiB, 80G (both 2**30), 80GB (10**9), 512MiB, 1.5TiB: a size in bytes."""
    number = text.strip().rstrip("bBiIkKmMgGtT")
    unit = text.strip()[len(number):].lower()
    if not unit:  # 80 is not 80 bytes by default: a device's memory is said with its unit
        raise argparse.ArgumentTypeError(f"{text!r} has no unit: say 80GiB, 80GB or 512MiB")
    try:
        value = float(number) * UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 80GiB, 512MiB or 80GB")
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: a size above 0")
    return value


def _fmt(v, spec, width):
    return format("-" if v is None else format(v, spec), f">{width}")


def format_table(projections, net, scaling, source):
    lines = [f"{'case':<28} {'world':>6} {'nodes':>5} {'step ms':>10} {'band ms':>19} {'samples/s':>12} {'efficiency':>10} "
             f"{'comm ms':>9} {'exposed':>9} {'mem/dev':>10}  algorithm"]
    lines.append("-" * len(lines[0]))
    for p in projections:
        name = f"{p.workload}/{p.strategy}"
        if p.status != "projected":
            lines.append(f"{name:<28} {p.world:>6} {p.nodes:>5}  refused: {p.reason}")
            continue
        eff = None if p.scaling_efficiency is None else p.scaling_efficiency * 100
        mark = "%*" if eff is not None and eff > 100 else "% "  # *: explained under the table
        mem = "-" if p.memory_per_device_bytes is None else answers.format_bytes(p.memory_per_device_bytes)
        band = "-" if not p.step_ms_band else f"{p.step_ms_band[0]:.3f}-{p.step_ms_band[1]:.3f}"
        lines.append(f"{name:<28} {p.world:>6} {p.nodes:>5} {p.step_ms:>10.3f} {band:>19} {p.samples_per_second:>12.4g} "
                     f"{_fmt(eff, '.1f', 8)}{mark}{_fmt(p.comm_ms, '.3f', 9)} {_fmt(p.exposed_comm_ms, '.3f', 9)} "
                     f"{mem:>10}  {','.join(p.algorithms) or '-'}")
    lines.append("")
    lines.append("assumptions:")
    lines.append(f"  measured: {source}; projected from: "
                 + ", ".join(sorted({p.from_case for p in projections})))
    lines.append("  scaling: " + ("weak: each rank keeps the measured per-rank batch, the global batch grows"
                                  if scaling == "weak" else
                                  "strong: the measured global batch is split over the ranks; compute is taken "
                                  "as linear in the batch (small per-device batches on GPUs run slower than that)"))
    lines += ["  " + x for x in net.describe()]
    lines.append("  band ms: the step time with every link at the high end of its efficiency's range and "
                 "the compute slow-down at its low end, and the other way round")
    if any(p.memory_per_device_bytes is not None for p in projections):
        lines.append("  mem/dev: ZeRO's formulas over the whole model's parameter, gradient and optimizer bytes, plus "
                     "the measured case's rest of the peak (activations, buffers) as it was, changed by what the activations "
                     "change by at the projected micro-batch (the activations' line below)")
    lines.append("  every rank as fast as the measured one; no straggler or congestion (docs/projection.md)")
    for note in sorted({a for p in projections for a in p.assumptions}):
        lines.append("  " + note)
    return "\n".join(lines)


def to_json(projections, net, scaling, source, worlds, device_memory=None, tokens=None):
    return {"ddpbench_projection": SCHEMA_VERSION, "source": source, "worlds": worlds, "scaling": scaling,
            "tokens_per_sample": tokens,  # --seq-len; null: each workload as measured
            "network": net.to_json(), "network_sources": net.sources, "assumptions_text": net.describe(),
            "device_memory_bytes": device_memory,
            "fit": answers.fit_answers(projections, device_memory) if device_memory else [],
            "projections": [p.to_json() for p in projections]}


def _check_output(flag, path, inputs):
    if path is None:
        return
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise network.NetworkError(f"{flag} {path}: directory {directory} does not exist (mkdir -p it first)")
    if os.path.isdir(path):
        raise network.NetworkError(f"{flag} {path}: is a directory")
    for i in inputs:
        if os.path.exists(i) and os.path.exists(path) and os.path.samefile(i, path):
            raise network.NetworkError(f"{flag} {path}: names an input file; it would be overwritten")


def _same_file(a, b):
    """One file under two names: the same inode when both exist, else the same resolved path."""
    if os.path.exists(a) and os.path.exists(b):
        return os.path.samefile(a, b)
    return os.path.realpath(a) == os.path.realpath(b)


def _checkpointed_run(path, doc):
    """--checkpointed's file, loaded: a ddpbench run under --activation-checkpointing of a workload
    RESULTS has, that measured activations and recompute; else a ResultsError naming the file."""
    checkpointed = results.load(path)
    if results.is_micro(checkpointed):
        raise results.ResultsError(f"--checkpointed {path}: a ddpbench-micro file, not a ddpbench run")
    levers = (checkpointed["context"]["ddpbench"].get("settings", {}).get("strategy_settings") or {}).get("levers") or {}
    policy = levers.get("activation_checkpointing") or "none"
    if policy == "none":
        raise results.ResultsError(f"--checkpointed {path}: ran without --activation-checkpointing (its levers say none)")
    workloads = {c.workload for c in model.measured_cases(doc)}
    cases = model.measured_cases(checkpointed)
    if not any(model.activations.fit_checkpointed(cases, w) for w in workloads):
        raise results.ResultsError(f"--checkpointed {path}: no case of {', '.join(sorted(workloads))} under single, ddp, "
                                   f"zero1, zero2 or fsdp with activations and recompute measured")
    return checkpointed


def main(argv=None):
    p = OneLineParser(prog="ddpbench-project", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("results", help="a ddpbench results JSON file")
    p.add_argument("--world", type=_worlds, default=[8, 64, 512], help="world sizes to project (default 8,64,512)")
    p.add_argument("--gpus-per-node", type=_positive, default=None,
                   help="devices per node (default: the network's, 8 for the presets)")
    p.add_argument("--network", default="nvlink4+ndr400",
                   help="INTRA+INTER presets (default nvlink4+ndr400) or a file: a network description, "
                        "ddpbench-micro JSON or nccl-tests output")
    p.add_argument("--link-run", metavar="RUN.json",
                   help="a ddpbench run across two nodes or more of this network (ddp, zero1 or zero2): the "
                        "inter-node link's efficiency range widened to what its collectives reached")
    p.add_argument("--scaling", choices=("weak", "strong"), default="weak",
                   help="weak (default): each rank keeps its measured batch; strong: the global batch is split")
    p.add_argument("--strategy", default=None,
                   help="strategies to project (default: ddp, dp, hogwild and each of zero1, zero2, fsdp, pp, tp "
                        "the file measured)")
    p.add_argument("--device-memory", type=_bytes, default=None,
                   help="memory a device has (80GiB, 141GB): which strategies fit at each world size, and the "
                        "fastest of those")
    p.add_argument("--checkpointed", metavar="RUN.json",
                   help="a ddpbench run of the same workloads under --activation-checkpointing: its activations and "
                        "recompute time make checkpointing a way to fit under --device-memory")
    p.add_argument("--seq-len", type=_positive, default=None, metavar="TOKENS",
                   help="read the sequence models' cases at this many tokens a sample (compute by their FLOPs, "
                        "activations by their facts: attention's kept scores as the square); default: as measured")
    p.add_argument("--json", dest="json_out", help="write the projection as JSON here")
    p.add_argument("--chart", help="write the scaling-efficiency chart (PNG) here")
    args = p.parse_args(argv)
    strategies = None if args.strategy is None else [s for s in args.strategy.split(",") if s]
    unknown = [s for s in strategies or [] if s not in model.STRATEGIES]
    if unknown or strategies == []:
        p.error(f"--strategy: {','.join(unknown) or args.strategy!r} is not one of {', '.join(model.STRATEGIES)}")
    try:
        inputs = ([args.results] + ([args.network] if os.path.exists(args.network) else [])
                  + ([args.link_run] if args.link_run else []) + ([args.checkpointed] if args.checkpointed else []))
        _check_output("--json", args.json_out, inputs)
        _check_output("--chart", args.chart, inputs)
        if args.json_out and args.chart and _same_file(args.json_out, args.chart):
            raise network.NetworkError(f"--chart {args.chart}: the file --json names too; give each its own")
        doc = results.load(args.results)
        if results.is_micro(doc):
            raise results.ResultsError(f"{args.results}: a ddpbench-micro file; pass it as --network, and a "
                                       f"ddpbench run as RESULTS")
        net = network.load(args.network, args.gpus_per_node)
        if args.link_run:
            net = link_run.load_and_widen(net, args.link_run)
        checkpointed = _checkpointed_run(args.checkpointed, doc) if args.checkpointed else None
        projections = model.project_file(doc, net, args.world, args.scaling,
                                         strategies or model.default_strategies(doc), checkpointed, args.seq_len)
    except (results.ResultsError, network.NetworkError) as e:
        print(f"ddpbench-project: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except model.ProjectionError as e:
        print(f"ddpbench-project: {args.results}: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    print(format_table(projections, net, args.scaling, args.results))
    if args.device_memory:
        fits = answers.fit_answers(projections, args.device_memory)
        print("\nwhich fit (memory projected for ddp, zero1, zero2, fsdp, pp, tp):")
        print("\n".join("  " + a for a in fits) if fits else
              "  cannot tell: no projected case has its memory split by kind in the file")
    flag, path = "--json", args.json_out
    try:
        if args.json_out:
            files.write_atomically(args.json_out, json.dumps(to_json(projections, net, args.scaling, args.results,
                                                                args.world, args.device_memory, args.seq_len),
                                                        indent=1) + "\n")
        flag, path = "--chart", args.chart
        if args.chart:
            projection_file.chart(projections, args.chart)
    except OSError as e:
        print(f"ddpbench-project: {flag} {path}: cannot write: {e.strerror or e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0
