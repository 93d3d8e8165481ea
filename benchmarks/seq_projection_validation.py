#!/usr/bin/python3
"""ddpbench-project --seq-len checked against measurement on this machine: a sequence model measured
at one number of tokens a sample, read at others (projection/sequence.py), and those measured.

Each round: the workload under --strategies at --from-tokens (the base), then at each of --tokens,
back to back (this VM drifts between minutes). Each base case is read at each length by
sequence.rescale, the step that ddpbench-project --seq-len starts from, so the error is the
sequence model's alone (the network model is held against measurement by projection_validation.py):
its step time (compute by the FLOPs, the rest as measured), its activations and its peak (the
memory kinds' sum) against the same strategy's case measured at that length. A case's error is the
median over rounds.

    /usr/bin/python3 benchmarks/seq_projection_validation.py OUT_DIR [--workload gpt2]
        [--gpt2-size 4:8:256:512] [--strategies single,ddp,fsdp] [--world 2] [--batch 4]
        [--from-tokens 32] [--tokens 64,128] [--steps 5] [--repetitions 3] [--rounds 3] [--build build]

Writes OUT_DIR/validation.json and OUT_DIR/validation.md, and keeps every results file it read.
"""
import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from benchmarks.projection_validation import by_round, run  # noqa: E402
from projection import model, sequence  # noqa: E402
from reports import results, stats  # noqa: E402

KINDS = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes", "other_bytes")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--workload", default="gpt2")
    p.add_argument("--gpt2-size", default="4:8:256:512")
    p.add_argument("--strategies", default="single,ddp,fsdp")
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--from-tokens", type=int, default=32)
    p.add_argument("--tokens", default="64,128")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    targets = [int(t) for t in args.tokens.split(",")]
    strategies = args.strategies.split(",")
    os.makedirs(args.out, exist_ok=True)
    exe = os.path.join(args.build, "ddpbench")

    def measure(tokens, round_):
        path = os.path.join(args.out, f"{args.workload}-tokens{tokens}-round{round_}.json")
        size = ["--gpt2-size", args.gpt2_size] if args.workload == "gpt2" else []
        run([exe, "--strategy", ",".join(strategies), "--world-size", str(args.world), "--workload", args.workload,
             *size, "--seq-len", str(tokens), "--batch", str(args.batch), "--device", "cpu", "--threads", "1",
             "--steps", str(args.steps), "--warmup", "2", "--repetitions", str(args.repetitions),
             "--parity-steps", "0", "--json", path])
        return {c.strategy: c for c in model.measured_cases(results.load(path))}

    samples = {}
    for round_ in range(args.rounds):
        base = measure(args.from_tokens, round_)
        for tokens in targets:
            measured = measure(tokens, round_)
            for strategy in strategies:
                b, m = base[strategy], measured[strategy]
                reason = sequence.why_not(b, tokens)
                if reason:
                    raise SystemExit(f"seq_projection_validation: {b.name} at {tokens} tokens: {reason}")
                r = sequence.rescale(b, sequence.scale_for(b, tokens))
                s = samples.setdefault((strategy, tokens), {k: [] for k in (
                    "predicted_ms", "measured_ms", "errors", "activation_errors", "peak_errors")})
                s["predicted_ms"].append(r.step_s * 1e3)
                s["measured_ms"].append(m.step_s * 1e3)
                s["errors"].append(r.step_s / m.step_s - 1)
                s["activation_errors"].append(r.activation_bytes / m.activation_bytes - 1)
                s["peak_errors"].append(sum(r.memory[k] for k in KINDS) / sum(m.memory[k] for k in KINDS) - 1)
                print(f"round {round_} {b.name} {args.from_tokens} -> {tokens} tokens: step {s['errors'][-1] * 100:+.1f}%, "
                      f"activations {s['activation_errors'][-1] * 100:+.2f}%, peak {s['peak_errors'][-1] * 100:+.1f}%",
                      flush=True)

    rows = [{"strategy": strategy, "from_tokens": args.from_tokens, "tokens": tokens, "rounds": len(s["errors"]),
             "error": stats.median(s["errors"]), "round_errors": s["errors"],
             "predicted_ms": stats.median(s["predicted_ms"]), "measured_ms": stats.median(s["measured_ms"]),
             "activation_error": stats.median(s["activation_errors"]), "peak_error": stats.median(s["peak_errors"])}
            for (strategy, tokens), s in samples.items()]
    errors = [abs(r["error"]) for r in rows]
    doc = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "rows": rows,
           "summary": {"cases": len(rows), "median_abs_error": stats.median(errors), "max_abs_error": max(errors)}}
    with open(os.path.join(args.out, "validation.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["| case | tokens | step error (median of rounds) | by round | predicted / measured ms | activations | peak |",
             "|---|---|---|---|---|---|---|"]
    lines += [f"| {args.workload}/{r['strategy']} | {r['from_tokens']} -> {r['tokens']} | {r['error'] * 100:+.1f}% | "
              f"{by_round(r['round_errors'])} | {r['predicted_ms']:.1f} / {r['measured_ms']:.1f} | "
              f"{r['activation_error'] * 100:+.2f}% | {r['peak_error'] * 100:+.1f}% |" for r in rows]
    lines += ["", f"{args.workload} read at other lengths, {len(rows)} cases: step time's median absolute error "
              f"{doc['summary']['median_abs_error'] * 100:.1f}%, largest {doc['summary']['max_abs_error'] * 100:.1f}%."]
    with open(os.path.join(args.out, "validation.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
