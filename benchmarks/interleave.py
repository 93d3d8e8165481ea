"""Interleaved rounds for the side-by-side benchmarks: every round runs every tool once, in fresh
processes, the order rotating each round so the machine's drift hits all of them alike."""
import statistics
import sys


def run_rounds(tools, rounds):
    """tools: {name: callable returning a mean step time in ms}. Returns {name: [ms per round]}."""
    names = list(tools)
    samples = {n: [] for n in names}
    for r in range(rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        for n in order:
            samples[n].append(tools[n]())
        print(f"round {r + 1}/{rounds}: " + ", ".join(f"{n} {samples[n][-1]:.2f} ms" for n in names), file=sys.stderr)
    return samples


def print_table(samples, base, label="loop"):
    """Median step time per tool and the throughput of `base` over each tool's: of medians, and of
    best rounds (the rounds least disturbed by the machine's noise bursts)."""
    med = {n: statistics.median(v) for n, v in samples.items()}
    best = {n: min(v) for n, v in samples.items()}
    print(f"| {label} | median step ms | min..max | {base} throughput / this one's (medians) | (best rounds) |")
    print("|---|---|---|---|---|")
    for n, v in samples.items():
        print(f"| {n} | {med[n]:.2f} | {best[n]:.2f}..{max(v):.2f} | {med[n] / med[base]:.3f}x | "
              f"{best[n] / best[base]:.3f}x |")
    return med
