"""Interleaved rounds for the side-by-side benchmarks: every round runs every tool once, in fresh
processes, the order rotating each round so the machine's drift hits all of them alike. Also the
two ways a tool's mean step time is read: from a ddpbench run's JSON, or from a peer's stdout."""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from reports import results  # noqa: E402


def ddpbench_case(build, flags):
    """The one measured entry (its "ddpbench" fields) of a one-repetition, one-case ddpbench run with `flags`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "r.json")
        # Exactly one repetition (no adaptive sampling), as the peer runs its steps once.
        subprocess.run([os.path.join(build, "ddpbench"), "--repetitions", "1", "--target-precision", "0", "--parity-steps", "0",
                        "--json", path] + flags, check=True, stdout=subprocess.DEVNULL)
        (case,) = [b for b in results.load(path)["benchmarks"] if b["run_type"] == "iteration"]
        return case["ddpbench"]


def ddpbench_step_ms(build, flags):
    """Mean step time (ms) of a one-repetition, one-case ddpbench run with `flags`."""
    return statistics.fmean(ddpbench_case(build, flags)["step_times_ms"])


def ddpbench_mlp_step_ms(args, strategy, world, threads, extra=()):
    """ddpbench_step_ms of `strategy` on mlp on CPU, with the comparison's batch, steps and warm-up."""
    return ddpbench_step_ms(args.build, ["--strategy", strategy, "--workload", "mlp", "--device", "cpu",
                                         "--world-size", str(world), "--threads", str(threads),
                                         "--batch", str(args.batch), "--steps", str(args.steps),
                                         "--warmup", str(args.warmup)] + list(extra))


# ddpbench keeps freed CPU buffers of up to 32 MiB for reuse (mallopt in devices/counting_allocator.cpp,
# as a GPU's caching allocator keeps its blocks); a peer gets the same glibc settings, so neither side
# pays page faults the other does not (glibc 2.41 returns large freed blocks to the kernel otherwise).
MALLOC_TUNABLES = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=1073741824"


def peer_environment(base=None):
    """The environment a peer runs in: `base` (os.environ) with ddpbench's malloc settings."""
    env = dict(os.environ if base is None else base)
    env["GLIBC_TUNABLES"] = ":".join(t for t in (env.get("GLIBC_TUNABLES"), MALLOC_TUNABLES) if t)
    return env


def tool_step_ms(cmd):
    """Mean step time (ms) of a peer that prints {"step_ms": [...]} on stdout."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=peer_environment())
    if done.returncode != 0:  # the peer's own words, which a bare CalledProcessError would drop
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return statistics.fmean(json.loads(done.stdout)["step_ms"])


def build_heap_counter(directory):
    """benchmarks/heap_counter.c built into `directory` for LD_PRELOAD; None without a C compiler."""
    library = os.path.join(directory, "libheap_counter.so")
    try:
        subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", library, os.path.join(ROOT, "benchmarks", "heap_counter.c")],
                       check=True, capture_output=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return library


def peer_environment_counting_heap(directory):
    """(peer_environment() with benchmarks/heap_counter.c built into `directory` and preloaded, the
    counter's path); the path is None, and nothing preloaded, where there is no C compiler: the
    peer then reads its peak from torch.profiler's memory events (benchmarks/heap_peak.py)."""
    env = peer_environment()
    counter = build_heap_counter(directory)
    if counter:
        env["LD_PRELOAD"] = counter
    return env, counter


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


def print_peak_table(peaks, names, base, digits=1):
    """The median peak on rank 0 of each run in `names` ({name: [bytes per round]}), in MiB, and
    each over `base`'s."""
    print(f"| run | peak on rank 0, MiB (median) | this one's / {base}'s |")
    print("|---|---|---|")
    med = {n: statistics.median(v) for n, v in peaks.items()}
    for n in names:
        print(f"| {n} | {med[n] / 2 ** 20:.{digits}f} | {med[n] / med[base]:.3f}x |")


def parser(doc, rounds, steps, batch):
    """The options every comparison takes, with its own defaults."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=rounds)
    p.add_argument("--steps", type=int, default=steps)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--batch", type=int, default=batch)
    p.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"))
    p.add_argument("--json", help="also write the measurements here")
    return p


def add_to_json(args, **fields):
    """Adds `fields` to the file report() wrote for --json, where one was asked for."""
    if not args.json:
        return
    with open(args.json) as f:
        doc = json.load(f)
    doc.update(fields)
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=2)


def report(args, samples, heading, base, label="loop"):
    """The heading with this machine's name and cores, the table, and the measurements in --json."""
    print(f"{heading}; {platform.node()}, {os.cpu_count()} CPUs")
    med = print_table(samples, base, label)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "step_ms": samples, "median_step_ms": med}, f, indent=2)
    return med
