"""What a projection reads and writes: the measured cases of a results file (the median entry of
each, in seconds and bytes) and the Projection of one strategy at one world size. Plain data, used
by model.py and pipeline.py alike."""
from dataclasses import dataclass, field
from typing import List, Optional


class ProjectionError(ValueError):
    """A results file that holds nothing a projection can start from."""


@dataclass
class Bucket:
    nbytes: float
    ready_s: float


@dataclass
class MeasuredCase:
    """The median entry of one measured case, in the units the model uses."""
    name: str
    workload: str
    strategy: str
    world: int
    global_batch: int
    phases: dict                   # seconds per step, by phase name
    gradient_bytes: Optional[float]
    buckets: Optional[List[Bucket]]  # ddp only: the measured timeline
    step_s: float
    memory: Optional[dict] = None  # device 0's bytes by kind: parameter, gradient, optimizer_state, other
    units: Optional[int] = None    # fsdp: its wrap units (the root counted)
    # fsdp: each unit's parameter bytes and whether it is the root, in build order (files from
    # before they were recorded have none: the units are then taken as equal)
    unit_bytes: Optional[List[tuple]] = None
    settings: dict = field(default_factory=dict)  # the strategy's own flags as the file records them
    pipeline: Optional[dict] = None  # pp: the JSON's pipeline object (its cut, units, schedule)
    point_to_point_bytes: Optional[float] = None  # pp: what its rank 0 sent its neighbour a step
    comm_bytes_per_step: Optional[float] = None  # tp: the bytes its all-reduces carried a step
    comm_collectives: Optional[int] = None       # tp: its collectives a step, of every kind
    mesh: Optional[str] = None                   # tp, pp: the mesh it ran on (--mesh, "dp=2,tp=2"), if any
    # tp under --sequence-parallel: its reduce-scatters and all-gathers a step, each (count, bytes)
    reduce_scatters: Optional[tuple] = None
    all_gathers: Optional[tuple] = None
    activation_bytes: Optional[float] = None     # device 0's: what forward left alive for backward
    recompute_s: float = 0.0                     # --activation-checkpointing: the recompute phase (in backward too)
    levers: dict = field(default_factory=dict)   # the file's --activation-checkpointing, --grad-accum, ...
    facts: dict = field(default_factory=dict)    # the case's workload_facts (sequence.py reads its tokens)

    def phase(self, name):
        return self.phases.get(name, 0.0)

    @property
    def per_rank_batch(self):
        return self.global_batch / self.world


@dataclass
class Projection:
    workload: str
    strategy: str
    world: int
    nodes: int
    status: str                    # "projected" or "refused"
    reason: str = ""
    step_ms: Optional[float] = None
    samples_per_second: Optional[float] = None
    scaling_efficiency: Optional[float] = None
    comm_ms: Optional[float] = None          # all collectives' time per step
    exposed_comm_ms: Optional[float] = None  # what backward did not hide
    algorithms: List[str] = field(default_factory=list)
    from_case: str = ""
    memory_per_device_bytes: Optional[float] = None  # ddp, zero1, zero2, fsdp
    assumptions: List[str] = field(default_factory=list)
    compute_slowdown: Optional[dict] = None  # ddp, zero1, zero2, fsdp: backward's slow-down (slowdown.py)
    # The band that the links' efficiency ranges and the compute slow-down's range span: [fast, slow]
    # step time, [slow, fast] throughput.
    step_ms_band: Optional[List[float]] = None
    samples_per_second_band: Optional[List[float]] = None
    # ddp, zero1, zero2, fsdp from a case of one model per device: the activations per device at the
    # projected micro-batch (activations.py), and the levers that would cut them (LeverOption.to_json)
    activation_bytes: Optional[float] = None
    levers: List[dict] = field(default_factory=list)

    def to_json(self):
        return dict(self.__dict__)


def _median_entries(doc):
    """Each case's median aggregate, or where the file has none (ddpbench-ab's and ddpbench-levers'
    merged files keep their rounds as repetitions only) its median repetition, a whole one (the
    lower of the two middle ones by time): its phases, memory and timeline belong together."""
    medians = [b for b in doc["benchmarks"] if b["run_type"] == "aggregate" and b.get("aggregate_name") == "median"]
    have = {b.get("run_name", b["name"]) for b in medians}
    repetitions = {}
    for b in doc["benchmarks"]:
        name = b.get("run_name", b["name"])
        if b["run_type"] == "iteration" and name not in have and (b.get("ddpbench") or {}).get("status") == "ok":
            repetitions.setdefault(name, []).append(b)
    for entries in repetitions.values():
        entries.sort(key=lambda b: b.get("real_time", 0.0))
        medians.append(entries[(len(entries) - 1) // 2])
    return medians


def measured_cases(doc):
    """MeasuredCase for every case of the file that was measured (median entries, status ok)."""
    out = []
    strategy_settings = doc["context"]["ddpbench"].get("settings", {}).get("strategy_settings") or {}
    # pp's pipeline object is written on each repetition, not on the aggregates: its cut and unit
    # figures are the case's, the same every repetition (the last one kept).
    pipelines = {b.get("run_name", b["name"]): b["ddpbench"]["pipeline"] for b in doc["benchmarks"]
                 if b["run_type"] == "iteration" and isinstance((b.get("ddpbench") or {}).get("pipeline"), dict)}
    for b in _median_entries(doc):
        f = b["ddpbench"]
        if f["status"] != "ok" or not f.get("phases_ms"):
            continue
        batch = f.get("global_batch")
        if not isinstance(batch, (int, float)) or batch <= 0:
            continue
        phases = {k: v / 1e3 for k, v in f["phases_ms"].items()}
        # --activation-checkpointing: the recomputation runs inside backward, between the gradients
        # it yields, so the timelines replay it as backward's own compute (docs/memory.md).
        recompute = phases.get("recompute", 0.0)
        if "recompute" in phases:
            phases["backward"] = phases.get("backward", 0.0) + phases.pop("recompute")
        comm = f.get("comm") or {}
        buckets = None
        if comm.get("bucket_timeline"):
            if any("bytes" not in x or "ready_ms" not in x for x in comm["bucket_timeline"]):
                raise ProjectionError(f"{b['name']}: a bucket_timeline entry lacks bytes or ready_ms")
            buckets = [Bucket(float(x["bytes"]), x["ready_ms"] / 1e3) for x in comm["bucket_timeline"]]
        facts = f.get("workload_facts") or {}
        device0 = (f.get("memory") or [{}])[0] or {}
        kinds = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes", "other_bytes")
        memory = {k: float(device0[k]) for k in kinds} if all(
            isinstance(device0.get(k), (int, float)) for k in kinds) else None
        units = comm.get("buckets") if f["strategy"] == "fsdp" and isinstance(comm.get("buckets"), int) else None
        unit_bytes = [(float(u["bytes"]), bool(u["root"])) for u in comm.get("units") or []] or None
        settings = strategy_settings.get(f["strategy"])
        activations = device0.get("activation_bytes")
        levers = strategy_settings.get("levers")
        out.append(MeasuredCase(name=b.get("run_name", b["name"]), workload=f["workload"], strategy=f["strategy"],
                                world=int(f["world_size"]), global_batch=int(batch), phases=phases,
                                gradient_bytes=facts.get("gradient_bytes") or comm.get("bytes_per_step"),
                                buckets=buckets, step_s=b["real_time"] * _to_s(b.get("time_unit", "ms")),
                                memory=memory, units=units if units and units > 0 else None,
                                unit_bytes=unit_bytes if f["strategy"] == "fsdp" else None,
                                settings=dict(settings) if isinstance(settings, dict) else {},
                                pipeline=pipelines.get(b.get("run_name", b["name"])) if f["strategy"] == "pp" else None,
                                point_to_point_bytes=comm.get("point_to_point_bytes_per_step"),
                                comm_bytes_per_step=comm.get("bytes_per_step") if f["strategy"] == "tp" else None,
                                comm_collectives=comm.get("buckets") if f["strategy"] == "tp" else None,
                                mesh=strategy_settings.get("mesh") if f["strategy"] in ("tp", "pp") else None,
                                reduce_scatters=_counted(comm, "reduce_scatters_per_step",
                                                         "reduce_scatter_bytes_per_step") if f["strategy"] == "tp" else None,
                                all_gathers=_counted(comm, "all_gathers_per_step",
                                                     "all_gather_bytes_per_step") if f["strategy"] == "tp" else None,
                                activation_bytes=float(activations) if isinstance(activations, (int, float)) else None,
                                recompute_s=recompute,
                                levers=dict(levers) if isinstance(levers, dict) else {},
                                facts=dict(facts) if isinstance(facts, dict) else {}))
    return out


def _counted(comm, count_key, bytes_key):
    """(count, bytes) of one kind of collective a step where the file counts them, else None."""
    count = comm.get(count_key)
    return (int(count), float(comm.get(bytes_key) or 0)) if count else None


def _to_s(unit):
    return {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]
