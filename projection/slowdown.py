"""Compute slowed by communication: how much longer backward runs at world > 1 than alone, while the
collectives it overlaps with take cycles from the same cores (Gloo's copies on a CPU host) or SMs and
memory bandwidth (NCCL's kernels on a GPU).

Fitted from the file where it holds the pair that shows it: a world-1 `single` case and a `ddp` case
at world 2 or more of the same workload. Backward per sample of each repetition of ddp against the
same repetition of single, less what the measuring host's shared cores explain (ranks beyond its
cores run slower whether or not they communicate: the file's num_cpus and threads per device), is
the factor; the median over repetitions is the point and their spread the range. Without the pair,
a stated default with its source.
"""
import statistics
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Slowdown:
    factor: float = 1.0  # backward's time at world > 1 over its time alone
    low: float = 1.0
    high: float = 1.0
    source: str = "none assumed"

    def at(self, bound):
        """The slow-down at the low or high end of its range ("low", "high"), or as it is."""
        return replace(self, factor={"low": self.low, "high": self.high}.get(bound, self.factor))

    def describe(self):
        span = f" ({self.low:.3f}-{self.high:.3f})" if (self.low, self.high) != (self.factor, self.factor) else ""
        return f"compute slowed by communication: backward x{self.factor:.3f}{span} at world > 1: {self.source}"

    def to_json(self):
        return {"factor": self.factor, "low": self.low, "high": self.high, "source": self.source}


# Where the file cannot show it. GPUs: PyTorch's DDP benchmark (benchmarks/distributed/ddp/README.md,
# ResNet-50, batch 32 a GPU, V100s, NCCL): 0.103 s a step on 2 GPUs against 0.100 s on one, its
# all-reduce hidden behind backward. CPU hosts: issue 48's two-namespace ddp run (mlp, 400 Mbit/s,
# 2-core VM), compute some 33 ms longer while Gloo's threads shared the cores, about 15% of it.
GPU_DEFAULT = Slowdown(1.03, 1.0, 1.06, "default for GPUs, not fitted (the file has no single and ddp pair "
                                        "on CUDA): PyTorch's DDP benchmark README, ResNet-50 on V100s with NCCL, "
                                        "0.103 s a step on 2 GPUs against 0.100 s on one with the all-reduce hidden")
CPU_DEFAULT = Slowdown(1.0, 1.0, 1.15, "default for CPU hosts, not fitted (the file has no single and ddp pair): "
                                       "none at the point, up to 15% at the band's slow end, as a two-namespace ddp "
                                       "run measured while Gloo's threads shared a 2-core VM's cores (issue 48)")


def _backward_per_sample(entry):
    f = entry["ddpbench"]
    batch = f.get("global_batch")
    backward = (f.get("phases_ms") or {}).get("backward")
    if not isinstance(batch, (int, float)) or batch <= 0 or not isinstance(backward, (int, float)) or backward <= 0:
        return None
    return backward / (batch / f["world_size"])


def _repetitions(doc, run_name):
    return [b for b in doc["benchmarks"] if b.get("run_type") == "iteration" and b.get("run_name") == run_name
            and b["ddpbench"].get("status") == "ok"]


def _host_contention(doc, world):
    """How much slower a rank computes at `world` on the measuring host for sharing its cores alone."""
    d = doc["context"]["ddpbench"]
    settings = d.get("settings", {})
    if settings.get("device_kind") != "cpu":
        return 1.0
    cpus = doc["context"].get("num_cpus") or 1
    threads = settings.get("threads_per_device") or 1
    return max(1.0, world * threads / cpus)


def fit(doc, workload, target_on_gpus):
    """The slow-down of `workload`'s backward at world > 1, from the file's single and ddp cases, or
    the default for the target (GPUs or CPU hosts) where the file cannot show it, or where it was
    measured on the other kind of device than the target's."""
    default = GPU_DEFAULT if target_on_gpus else CPU_DEFAULT
    kind = doc["context"]["ddpbench"].get("settings", {}).get("device_kind")
    if (kind == "cuda") != target_on_gpus:
        return default
    names = {}
    for b in doc["benchmarks"]:
        f = b.get("ddpbench") or {}
        if b.get("run_type") == "iteration" and f.get("workload") == workload and f.get("status") == "ok":
            if f.get("strategy") == "single" and f.get("world_size") == 1 or f.get("strategy") == "ddp":
                names.setdefault((f["strategy"], f["world_size"]), b["run_name"])
    ddp_worlds = sorted(w for s, w in names if s == "ddp" and w > 1)
    if ("single", 1) not in names or not ddp_worlds:
        return default
    world = ddp_worlds[0]
    alone = [_backward_per_sample(b) for b in _repetitions(doc, names[("single", 1)])]
    shared = [_backward_per_sample(b) for b in _repetitions(doc, names[("ddp", world)])]
    ratios = [s / a / (_host_contention(doc, world) / _host_contention(doc, 1))
              for a, s in zip(alone, shared) if a and s]
    if not ratios:
        return default
    factor = statistics.median(ratios)
    return Slowdown(factor, min(ratios + [factor]), max(ratios + [factor]),
                    f"fitted: {workload}/ddp/world:{world}'s backward per sample against {workload}/single/world:1's, "
                    f"each repetition against its own, less the measuring host's shared cores; "
                    f"median of {len(ratios)}, the range their spread")
