"""Step time of ddp, dp and hogwild at another world size and network, from one measured case.

What is measured is kept and only what changes is modelled:
- compute (data, forward, backward) scales with each rank's share of the batch: linear in the
  batch (--scaling strong keeps the global batch and splits it; weak keeps each rank's batch), and
  by how many ranks of a node compute at once beyond its compute slots (CPU virtual devices share
  cores; GPUs do not);
- the optimizer, ddp's unpacking of the buckets and the residual stay as measured (they scale with
  the parameters, not the batch);
- communication is replaced by the network model (collectives.py). For ddp the measured bucket
  timeline is replayed: bucket i's all-reduce starts when its last gradient is ready (its measured
  ready time, scaled like backward) and the previous bucket's all-reduce is done (one stream, in
  order); what runs past the end of backward is exposed. A `single` case has no timeline: buckets
  of DDP's default caps (1 MiB first, then 25 MiB) are assumed, ready evenly through backward by
  bytes, and the projection says so.
- dp (DataParallel, one process): replicate (broadcast of the parameters) and reduce (of the
  gradients) over the copy link, replicas' forward and backward in parallel, the rest as measured;
  refused beyond one node. hogwild: every worker a whole step on its share; one node.
"""
from dataclasses import dataclass, field
from typing import List, Optional

from projection import collectives

FIRST_BUCKET_BYTES = 1 << 20   # DDP's first bucket
BUCKET_BYTES = 25 << 20        # DDP's bucket_cap_mb default


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
    assumptions: List[str] = field(default_factory=list)

    def to_json(self):
        return dict(self.__dict__)


def measured_cases(doc):
    """MeasuredCase for every case of the file that was measured (median entries, status ok)."""
    out = []
    for b in doc["benchmarks"]:
        if b["run_type"] != "aggregate" or b.get("aggregate_name") != "median":
            continue
        f = b["ddpbench"]
        if f["status"] != "ok" or not f.get("phases_ms"):
            continue
        batch = f.get("global_batch")
        if not isinstance(batch, (int, float)) or batch <= 0:
            continue
        phases = {k: v / 1e3 for k, v in f["phases_ms"].items()}
        comm = f.get("comm") or {}
        buckets = None
        if comm.get("bucket_timeline"):
            if any("bytes" not in x or "ready_ms" not in x for x in comm["bucket_timeline"]):
                raise ProjectionError(f"{b['name']}: a bucket_timeline entry lacks bytes or ready_ms")
            buckets = [Bucket(float(x["bytes"]), x["ready_ms"] / 1e3) for x in comm["bucket_timeline"]]
        facts = f.get("workload_facts") or {}
        out.append(MeasuredCase(name=b.get("run_name", b["name"]), workload=f["workload"], strategy=f["strategy"],
                                world=int(f["world_size"]), global_batch=int(batch), phases=phases,
                                gradient_bytes=facts.get("gradient_bytes") or comm.get("bytes_per_step"),
                                buckets=buckets, step_s=b["real_time"] * _to_s(b.get("time_unit", "ms"))))
    return out


def _to_s(unit):
    return {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def pick_base(cases, workload, strategy):
    """The case a strategy's projection starts from: that strategy at its smallest world (it ran the
    strategy's own code: ddp's bucket timeline), else `single`."""
    own = sorted((c for c in cases if c.workload == workload and c.strategy == strategy), key=lambda c: c.world)
    if own:
        return own[0]
    single = [c for c in cases if c.workload == workload and c.strategy == "single"]
    return single[0] if single else None


def _assumed_buckets(case):
    """DDP's default bucket caps over the gradient bytes, ready evenly through backward."""
    total = case.gradient_bytes
    if not total:
        raise ProjectionError(f"{case.name}: no gradient_bytes in the file to assume buckets from")
    backward = case.phase("backward")
    buckets, done = [], 0.0
    while done < total:
        size = min(FIRST_BUCKET_BYTES if not buckets else BUCKET_BYTES, total - done)
        done += size
        buckets.append(Bucket(size, backward * done / total))
    return buckets


class Projector:
    def __init__(self, network, scaling="weak"):
        if scaling not in ("weak", "strong"):
            raise ValueError(f"scaling {scaling!r}")
        self.network = network
        self.scaling = scaling

    # What one rank's compute is multiplied by at world W, against the measured case.
    def _batch_scale(self, case, world):
        return case.world / world if self.scaling == "strong" else 1.0

    def _contention(self, world):
        ranks_on_a_node = min(world, self.network.devices_per_node)
        return max(1.0, ranks_on_a_node / self.network.compute_slots)

    def _relative_contention(self, case, world):
        return self._contention(world) / self._contention(case.world)

    def _compute_scale(self, case, world):
        return self._batch_scale(case, world) * self._relative_contention(case, world)

    def _comm_scale(self, case, world):
        return self._relative_contention(case, world) if self.network.transport_on_compute_cores else 1.0

    def _global_batch(self, case, world):
        return case.global_batch if self.scaling == "strong" else case.per_rank_batch * world

    def _record(self, case, strategy, world, step_s, comm_s=None, exposed_s=None, algorithms=(), assumptions=()):
        nodes = collectives.nodes_for(world, self.network.devices_per_node)
        p = Projection(case.workload, strategy, world, nodes, "projected", step_ms=step_s * 1e3,
                       samples_per_second=self._global_batch(case, world) / step_s, from_case=case.name,
                       algorithms=sorted(set(algorithms)), assumptions=list(assumptions))
        if comm_s is not None:
            p.comm_ms = comm_s * 1e3
        if exposed_s is not None:
            p.exposed_comm_ms = exposed_s * 1e3
        return p

    def ddp(self, case, world):
        k = self._compute_scale(case, world)
        assumptions = []
        if case.buckets:
            buckets = case.buckets
        else:
            buckets = _assumed_buckets(case)
            assumptions.append(f"no ddp timeline in {case.name}: {len(buckets)} bucket(s) of DDP's default caps "
                               f"assumed ready evenly through backward")
        backward = case.phase("backward") * k
        clock, comm, algorithms = 0.0, 0.0, []
        for b in buckets:
            cost = collectives.allreduce(self.network, b.nbytes, world)
            seconds = cost.seconds * self._comm_scale(case, world)
            clock = max(clock, b.ready_s * k) + seconds
            comm += seconds
            algorithms.append(cost.algorithm)
        exposed = max(0.0, clock - backward)
        step = ((case.phase("data") + case.phase("forward")) * k + backward + exposed + case.phase("reduce")
                + case.phase("optimizer") * self._relative_contention(case, world)
                + case.phase("replicate") + case.phase("residual"))
        return self._record(case, "ddp", world, step, comm, exposed, algorithms, assumptions)

    def dp(self, case, world):
        nodes = collectives.nodes_for(world, self.network.devices_per_node)
        if nodes > 1:
            return Projection(case.workload, "dp", world, nodes, "refused", from_case=case.name,
                              reason="DataParallel is one process: it cannot span nodes")
        if not case.gradient_bytes:
            raise ProjectionError(f"{case.name}: no gradient_bytes in the file for DataParallel's copies")
        k = self._compute_scale(case, world)
        link = self.network.copy_link
        replicate = collectives.broadcast(link, case.gradient_bytes, world)
        reduce = collectives.reduce(link, case.gradient_bytes, world)
        copies = (replicate.seconds + reduce.seconds) * self._comm_scale(case, world)
        step = ((case.phase("data") + case.phase("scatter") + case.phase("forward") + case.phase("backward")) * k
                + copies + case.phase("gather_loss") + case.phase("optimizer") + case.phase("residual"))
        return self._record(case, "dp", world, step, copies, None,
                            [replicate.algorithm, reduce.algorithm])

    def hogwild(self, case, world):
        nodes = collectives.nodes_for(world, self.network.devices_per_node)
        if nodes > 1:
            return Projection(case.workload, "hogwild", world, nodes, "refused", from_case=case.name,
                              reason="Hogwild shares parameters in one node's memory")
        k = self._compute_scale(case, world)
        step = ((case.phase("data") + case.phase("forward") + case.phase("backward")) * k
                + (case.phase("optimizer") + case.phase("residual")) * self._relative_contention(case, world))
        return self._record(case, "hogwild", world, step)

    def project(self, case, strategy, world):
        return getattr(self, strategy.replace("-", "_"))(case, world)


STRATEGIES = ("ddp", "dp", "hogwild")


def project_file(doc, network, worlds, scaling="weak", strategies=STRATEGIES):
    """Every workload of the file under every strategy at every world size, with scaling efficiency
    against the same model's world 1."""
    cases = measured_cases(doc)
    if not cases:
        raise ProjectionError("no measured case (status ok, with phases) to project from")
    projector = Projector(network, scaling)
    out = []
    for workload in dict.fromkeys(c.workload for c in cases):
        for strategy in strategies:
            base = pick_base(cases, workload, strategy)
            if base is None:
                continue
            at_one = projector.project(base, strategy, 1)
            for world in worlds:
                p = projector.project(base, strategy, world)
                if p.status == "projected" and at_one.samples_per_second:
                    p.scaling_efficiency = p.samples_per_second / (world * at_one.samples_per_second)
                out.append(p)
    return out
