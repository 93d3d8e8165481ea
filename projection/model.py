"""Step time of ddp, dp, hogwild, zero1, zero2 and fsdp at another world size and network, and the
memory per device of ddp and the sharded three, from one measured case.

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
- zero1 and zero2 (ddpbench's both reduce-scatter their gradient buckets as backward makes them,
  and all-gather the updated parameters after the step): the buckets replayed against the
  reduce-scatter cost (a zero1 or zero2 case's own timeline; from another case DDP's default caps,
  ready evenly through backward), the optimizer on 1/W of the parameters, then the all-gather of
  the parameters, bucket by bucket where the buckets are measured, exposed.
- fsdp: the measured case's wrap units and root with their measured bytes (equal units from a file
  that does not record them), a unit's compute in proportion to its bytes; the root gathered once
  for the step; the units' collectives played on one stream as ddpbench's fsdp posts them
  (timelines.fsdp_exposed): in forward unit k+1's all-gather behind unit k's compute, in backward
  the next unit's gather behind a unit's backward and its reduce-scatter behind the next one's;
  resharding, prefetch and overlap as the case ran them (the file's settings; the defaults where
  it does not say); the optimizer on 1/W. Needs an fsdp case.
- memory per device, ZeRO's formulas (SHARDED.md) over the whole model's parameter, gradient and
  optimizer bytes (the measured case's per-device bytes times what it sharded them by), plus the
  measured rest of the peak (activations, buffers, a gathered unit) as it was.
"""
from projection import activations, collectives, sequence, timelines
from projection.cases import Bucket, MeasuredCase, Projection, ProjectionError, measured_cases  # noqa: F401
from projection.memory import SHARDS, memory_assumption, memory_per_device, whole_model_bytes
from projection.mesh import KINDS as LAYOUT_KINDS, pp_sizes, project_dp_pp, project_dp_tp, tp_sizes
from projection.pipeline import project_pp
from projection.tensor_parallel import project_tp
from projection.slowdown import Slowdown, fit as fit_slowdown

FIRST_BUCKET_BYTES = 1 << 20   # DDP's first bucket
BUCKET_BYTES = 25 << 20        # DDP's bucket_cap_mb default


def pick_base(cases, workload, strategy):
    """The case a strategy's projection starts from: that strategy at its smallest world (it ran the
    strategy's own code: ddp's bucket timeline, fsdp's units), else `single` (not for fsdp, pp, tp)."""
    own = sorted((c for c in cases if c.workload == workload and c.strategy == strategy), key=lambda c: c.world)
    if own:
        return own[0]
    if strategy in ("fsdp", "pp", "tp"):
        return None
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
    def __init__(self, network, scaling="weak", slowdown=Slowdown()):
        if scaling not in ("weak", "strong"):
            raise ValueError(f"scaling {scaling!r}")
        self.network = network
        self.scaling = scaling
        self.slowdown = slowdown  # backward's, while collectives overlap it (ddp, zero1, zero2, fsdp)
        self.singles = {}  # workload -> its single case: tp's projection reads the share its split divides
        self.activation_lines = {}  # workload -> its ActivationLine (activations.py), where measured
        self.checkpointed = {}      # workload -> its Checkpointed (activations.py), from --checkpointed

    # What one rank's compute is multiplied by at world W, against the measured case.
    def _batch_scale(self, case, world):
        return case.world / world if self.scaling == "strong" else 1.0

    def _contention(self, world):
        ranks_on_a_node = min(world, self.network.devices_per_node)
        return max(1.0, ranks_on_a_node / self.network.compute_slots)

    def relative_contention(self, case, world):
        return self._contention(world) / self._contention(case.world)

    def _compute_scale(self, case, world):
        return self._batch_scale(case, world) * self.relative_contention(case, world)

    def _backward_scale(self, case, world):
        """_compute_scale of a backward that collectives overlap: slowed at world > 1, and a case
        measured at world > 1 holds the slow-down already."""
        s = self.slowdown.factor
        return self._compute_scale(case, world) * (s if world > 1 else 1.0) / (s if case.world > 1 else 1.0)

    def _outside_backward(self, case, world, sent):
        """The compute outside backward that the collectives add at `world`, `sent(w)` being the
        bytes a rank sends a step at world w; a case measured at world > 1 holds its own already."""
        return self.slowdown.per_byte * (sent(world) - sent(case.world))

    def _with_slowdown(self, p):
        p.compute_slowdown = self.slowdown.to_json()
        p.assumptions.append(self.slowdown.describe())
        return p

    def comm_scale(self, case, world):
        return self.relative_contention(case, world) if self.network.transport_on_compute_cores else 1.0

    def _micro_batch(self, case, world):
        """The per-device micro-batch at `world`: the case's, split further under strong scaling."""
        return activations.micro_batch(case) * self._batch_scale(case, world)

    def _activations(self, case, world):
        """(activations per device at `world`, their change against the case's own), or (None, 0.0)
        where the file measured none for a model on one device."""
        line = self.activation_lines.get(case.workload)
        if line is None or case.activation_bytes is None or case.strategy not in activations.ONE_MODEL_PER_DEVICE:
            return None, 0.0
        change = line.at(self._micro_batch(case, world)) - line.at(activations.micro_batch(case))
        return max(0.0, case.activation_bytes + change), change

    def _memory(self, p, case, strategy, world):
        """p's memory per device (memory.py) and activations at `world`."""
        p.activation_bytes, change = self._activations(case, world)
        p.memory_per_device_bytes = memory_per_device(case, strategy, world, change)
        if p.activation_bytes is not None:
            p.assumptions.append(self.activation_lines[case.workload].describe(case.workload))
        return p

    def attach_levers(self, p, case, world):
        """The levers that cut p's activations (activations.py), where p's memory and activations are
        projected: --activation-checkpointing where a checkpointed run was given (and the file's own
        ran without it), and --grad-accum K while the micro-batch splits into whole samples."""
        line = self.activation_lines.get(case.workload)
        if p.status != "projected" or p.memory_per_device_bytes is None or p.activation_bytes is None or line is None:
            return p
        batch = self._micro_batch(case, world)
        options = []
        checkpointed = self.checkpointed.get(case.workload)
        if checkpointed is not None and line.checkpointing in ("", "none"):
            option = activations.checkpointing_option(
                p, line, checkpointed, batch, case.per_rank_batch * self._batch_scale(case, world),
                lambda measured_world: self._contention(world) / self._contention(measured_world))
            options += [option] if option else []
        if abs(batch - round(batch)) <= 1e-9:
            options += activations.grad_accum_options(p, line, int(round(batch)),
                                                      max(1, int(case.levers.get("grad_accum") or 1)))
        p.levers = [o.to_json() for o in options]
        return p

    def _global_batch(self, case, world):
        return case.global_batch if self.scaling == "strong" else case.per_rank_batch * world

    def record(self, case, strategy, world, step_s, comm_s=None, exposed_s=None, algorithms=(), assumptions=()):
        nodes = collectives.nodes_for(world, self.network.devices_per_node)
        p = Projection(case.workload, strategy, world, nodes, "projected", step_ms=step_s * 1e3,
                       samples_per_second=self._global_batch(case, world) / step_s, from_case=case.name,
                       algorithms=sorted(set(algorithms)), assumptions=list(assumptions))
        if comm_s is not None:
            p.comm_ms = comm_s * 1e3
        if exposed_s is not None:
            p.exposed_comm_ms = exposed_s * 1e3
        return p

    def _replay(self, case, world, buckets, collective, link):
        """The buckets' collectives on one stream behind backward (timelines.replay_buckets): (their
        time, what runs past the end of backward, their algorithms)."""
        k = self._backward_scale(case, world)
        return timelines.replay_buckets(buckets, k, case.phase("backward") * k,
                                        lambda nbytes: collective(self.network, nbytes, world), link,
                                        self.comm_scale(case, world))

    def ddp(self, case, world):
        k = self._compute_scale(case, world)
        assumptions = []
        if case.buckets:
            buckets = case.buckets
        else:
            buckets = _assumed_buckets(case)
            assumptions.append(f"no ddp timeline in {case.name}: {len(buckets)} bucket(s) of DDP's default caps "
                               f"assumed ready evenly through backward")
        backward = case.phase("backward") * self._backward_scale(case, world)
        # The link idles from the step's last all-reduce to its first bucket: the optimizer, the
        # data and forward, and backward up to the first bucket's gradients (the replay adds that).
        idle = ((case.phase("data") + case.phase("forward")) * k
                + case.phase("optimizer") * self.relative_contention(case, world))
        link = collectives.ShapedLink(self.network, world, idle)
        comm, exposed, algorithms = self._replay(case, world, buckets, collectives.allreduce, link)
        gradients = sum(b.nbytes for b in buckets)
        step = ((case.phase("data") + case.phase("forward")) * k + backward + exposed + case.phase("reduce")
                + case.phase("optimizer") * self.relative_contention(case, world)
                + case.phase("replicate") + case.phase("residual")
                + self._outside_backward(case, world, lambda w: 2 * (w - 1) / w * gradients))
        return self._with_slowdown(self.record(case, "ddp", world, step, comm, exposed, algorithms, assumptions))

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
        copies = (replicate.seconds + reduce.seconds) * self.comm_scale(case, world)
        step = ((case.phase("data") + case.phase("scatter") + case.phase("forward") + case.phase("backward")) * k
                + copies + case.phase("gather_loss") + case.phase("optimizer") + case.phase("residual"))
        return self.record(case, "dp", world, step, copies, None,
                            [replicate.algorithm, reduce.algorithm])

    def hogwild(self, case, world):
        nodes = collectives.nodes_for(world, self.network.devices_per_node)
        if nodes > 1:
            return Projection(case.workload, "hogwild", world, nodes, "refused", from_case=case.name,
                              reason="Hogwild shares parameters in one node's memory")
        k = self._compute_scale(case, world)
        step = ((case.phase("data") + case.phase("forward") + case.phase("backward")) * k
                + (case.phase("optimizer") + case.phase("residual")) * self.relative_contention(case, world))
        return self.record(case, "hogwild", world, step)

    def _sharded_optimizer(self, case, world):
        """The optimizer's time on 1/world of the parameters: the measured one, on the whole model or
        on the case's own 1/world_m, scaled to the projected share."""
        whole = case.phase("optimizer") * (case.world if case.strategy in SHARDS else 1)
        return whole / world * self.relative_contention(case, world)

    def _parameter_bytes(self, case):
        parts = whole_model_bytes(case)
        if parts is not None:
            return parts[0]
        if not case.gradient_bytes:
            raise ProjectionError(f"{case.name}: no gradient_bytes in the file to size the parameters by")
        return case.gradient_bytes  # parameters and gradients share a dtype

    def _zero(self, case, world, strategy):
        k = self._compute_scale(case, world)
        backward = case.phase("backward") * self._backward_scale(case, world)
        if case.strategy in ("zero1", "zero2") and case.buckets:
            # The case's own buckets (zero1's and zero2's are the same), reduce-scattered as they were
            # ready and all-gathered one after another after the step, as ShardedBuckets does.
            buckets = case.buckets
            gathered = [b.nbytes for b in buckets]
            said = (f"{strategy}: {case.name}'s {len(buckets)} gradient bucket(s) replayed, reduce-scattered as "
                    f"backward made them; the parameters all-gathered bucket by bucket after the step, exposed")
        else:
            buckets = _assumed_buckets(case)
            gathered = [self._parameter_bytes(case)]
            said = (f"{strategy}: {len(buckets)} gradient bucket(s) of DDP's default caps reduce-scattered as "
                    f"backward makes them; the parameters all-gathered after the step, exposed")
        # The link idles from the step's all-gather, its last collective, to its first reduce-scatter,
        # and from the last reduce-scatter to the all-gather while the optimizer runs.
        link = collectives.ShapedLink(self.network, world, (case.phase("data") + case.phase("forward")) * k)
        comm, exposed, algorithms = self._replay(case, world, buckets, collectives.reduce_scatter, link)
        link.idle(self._sharded_optimizer(case, world))
        gather_s = 0.0
        for nbytes in gathered:
            gather = collectives.all_gather(self.network, nbytes, world)
            gather_s += link.send(gather) * self.comm_scale(case, world)
        exposed += gather_s
        moved = sum(b.nbytes for b in buckets) + sum(gathered)
        step = ((case.phase("data") + case.phase("forward")) * k + backward + exposed
                + self._sharded_optimizer(case, world) + case.phase("residual")
                + self._outside_backward(case, world, lambda w: (w - 1) / w * moved))
        p = self.record(case, strategy, world, step, comm + gather_s, exposed, algorithms + [gather.algorithm],
                         [said])
        self._memory(p, case, strategy, world)
        if memory_assumption(case, strategy):
            p.assumptions.append(memory_assumption(case, strategy))
        return self._with_slowdown(p)

    def zero1(self, case, world):
        return self._zero(case, world, "zero1")

    def zero2(self, case, world):
        return self._zero(case, world, "zero2")

    def fsdp(self, case, world):
        if case.strategy != "fsdp" or not case.units:
            raise ProjectionError(f"{case.name}: fsdp is projected from an fsdp case (its wrap units)")
        k = self._compute_scale(case, world)
        scale = self.comm_scale(case, world)
        params = self._parameter_bytes(case)
        gradients = case.gradient_bytes or params
        assumptions = []
        if case.unit_bytes:
            total = sum(b for b, _ in case.unit_bytes)
            root = sum(b for b, r in case.unit_bytes if r) / total
            units = [b / total for b, r in case.unit_bytes if not r]  # each one's share of the model
            assumptions.append(f"fsdp: {case.name}'s {len(units)} wrap unit(s) and root as measured "
                               f"({root:.0%} of the parameters with the root, gathered once a step); "
                               f"a unit's compute taken in proportion to its bytes")
        else:
            root, units = 0.0, [1.0 / case.units] * case.units
            assumptions.append(f"fsdp: {case.name}'s {case.units} wrap units taken as equal in bytes and compute "
                               f"(the file does not record their bytes)")
        flags = case.settings
        reshard = flags.get("reshard_after_forward", True)
        prefetch = flags.get("prefetch", True)
        overlap = flags.get("overlap", True)
        if not flags:
            assumptions.append(f"fsdp: {case.name}'s file does not record fsdp's flags: the defaults assumed "
                               f"(resharded after forward, prefetch, overlap)")
        else:
            assumptions.append("fsdp: " + ", ".join([
                "resharded after forward: the units gathered twice a step" if reshard else
                "not resharded after forward: each unit gathered once a step",
                "prefetch" if prefetch else "no prefetch: each gather waited for", "overlap" if overlap else
                "no overlap: every collective on the step's thread"]) + f", as {case.name} ran")
        gather = collectives.all_gather(self.network, params, world)
        scatter = collectives.reduce_scatter(self.network, gradients, world)
        forward, backward = case.phase("forward") * k, case.phase("backward") * self._backward_scale(case, world)
        # The root's share of compute runs around the units. The link idles from the step's last
        # reduce-scatter through the optimizer and the next step's data.
        timeline = timelines.FsdpStep(units=units, root=root, forward=[forward * s for s in units],
                                  backward=[backward * s for s in units], reshard=reshard, prefetch=prefetch,
                                  overlap=overlap)
        link = collectives.ShapedLink(self.network, world, case.phase("data") * k + self._sharded_optimizer(case, world))
        comm, exposed = timelines.fsdp_exposed(
            timeline, lambda share: collectives.all_gather(self.network, params * share, world),
            lambda share: collectives.reduce_scatter(self.network, gradients * share, world), link, scale)
        # Bytes through the ring a step: every unit's parameters gathered (twice when resharded, the
        # root once) and every gradient reduce-scattered.
        moved = params * (root + sum(units) * (2 if reshard else 1)) + gradients
        step = (case.phase("data") * k + forward + backward + exposed + self._sharded_optimizer(case, world)
                + case.phase("residual") + self._outside_backward(case, world, lambda w: (w - 1) / w * moved))
        p = self.record(case, "fsdp", world, step, comm, exposed, [gather.algorithm, scatter.algorithm], assumptions)
        self._memory(p, case, "fsdp", world)
        return self._with_slowdown(p)

    def pp(self, case, world):
        return project_pp(self, case, world)

    def tp(self, case, world):
        return project_tp(self, case, world, self.singles.get(case.workload))

    def project(self, case, strategy, world):
        return self._with_band(lambda projector: projector._project_point(case, strategy, world))

    def project_layout(self, case, world, tp_size, kind="dp"):
        """The 2-D layout dp=world/tp_size,tp=tp_size (or fsdp=..., `kind`) from a 1-D tp case (mesh.py),
        with its band."""
        return self._with_band(lambda projector: project_dp_tp(projector, case, world,
                                                               projector.singles.get(case.workload), tp_size, kind))

    def project_pp_layout(self, case, world, pp_size, kind="dp"):
        """The 2-D layout dp=world/pp_size,pp=pp_size (or fsdp=..., `kind`) from a 1-D pp case (mesh.py),
        with its band."""
        return self._with_band(lambda projector: project_dp_pp(projector, case, world, pp_size, kind))

    def _with_band(self, point):
        """point(self), and its band: the same projection with every link at the high end of its
        efficiency and the slow-down at its low end, and the other way round."""
        p = point(self)
        if p.status == "projected":
            fast = Projector(self.network.at("high"), self.scaling, self.slowdown.at("low"))
            slow = Projector(self.network.at("low"), self.scaling, self.slowdown.at("high"))
            fast.singles = slow.singles = self.singles
            fast, slow = point(fast), point(slow)
            p.step_ms_band = [fast.step_ms, slow.step_ms]
            p.samples_per_second_band = [slow.samples_per_second, fast.samples_per_second]
        return p

    def _project_point(self, case, strategy, world):
        p = getattr(self, strategy.replace("-", "_"))(case, world)
        if strategy == "ddp" and p.memory_per_device_bytes is None:
            self._memory(p, case, "ddp", world)
            if memory_assumption(case, "ddp"):
                p.assumptions.append(memory_assumption(case, "ddp"))
        return p


STRATEGIES = ("ddp", "dp", "hogwild", "zero1", "zero2", "fsdp", "pp", "tp")
SHARDED = ("zero1", "zero2", "fsdp")
# Projected only from a case of their own (their units are measured, not assumed).
OWN_CASE_ONLY = SHARDED + ("pp", "tp")


def default_strategies(doc):
    """ddp, dp and hogwild, and each sharded strategy and pp where the file measured it."""
    measured = {c.strategy for c in measured_cases(doc)}
    return [s for s in STRATEGIES if s not in OWN_CASE_ONLY or s in measured]


def over_100_percent(p):
    """Why a projected scaling efficiency is above 100%, for the line under the table (the row's
    efficiency is marked with *)."""
    head = f"* {p.workload}/{p.strategy} at world {p.world}: efficiency {p.scaling_efficiency * 100:.1f}%, above 100% "
    if p.strategy in SHARDED:
        return head + (f"because each rank's optimizer steps 1/{p.world} of the parameters where one device steps "
                       "them all, and that saves more than the collectives it adds cost")
    return head + (f"because its projected step at world {p.world} is shorter than at world 1 "
                   "(the measured phases, scaled as the assumptions above say)")


def project_file(doc, network, worlds, scaling="weak", strategies=None, checkpointed_doc=None, tokens=None):
    """Every workload of the file under every strategy (default: default_strategies) at every world
    size, with scaling efficiency against the same model's world 1. `checkpointed_doc`: a run of the
    same workloads under --activation-checkpointing, which makes it a lever to fit by. `tokens`: the
    tokens a sample to read the sequence models' cases at (sequence.py; None: as measured)."""
    strategies = strategies or default_strategies(doc)
    cases = measured_cases(doc)
    if not cases:
        raise ProjectionError("no measured case (status ok, with phases) to project from")
    workloads = list(dict.fromkeys(c.workload for c in cases))
    checkpointed_cases = measured_cases(checkpointed_doc) if checkpointed_doc is not None else None
    scales, kept = {}, {}
    if tokens is not None:
        cases, scales, kept = sequence.at_tokens(cases, tokens)
        if checkpointed_cases is not None:
            try:
                checkpointed_cases = sequence.at_tokens(checkpointed_cases, tokens)[0]
            except ProjectionError:
                pass  # none of its workloads can be read at `tokens`: as measured, like the file's own of them
    out = []
    for workload in workloads:
        # A target whose transport is not the hosts' own cores is taken for GPUs (presets, nccl-tests).
        projector = Projector(network, scaling, fit_slowdown(doc, workload, not network.transport_on_compute_cores))
        single = pick_base(cases, workload, "single")
        if single is not None:
            projector.singles[workload] = single
        line = activations.fit(cases, workload)
        if line is not None:
            projector.activation_lines[workload] = line
        if checkpointed_cases is not None:
            checkpointed = activations.fit_checkpointed(checkpointed_cases, workload)
            if checkpointed is not None:
                projector.checkpointed[workload] = checkpointed
        notes = [scales[workload].describe()] if workload in scales else (
            [f"--seq-len {tokens}: {workload} as measured: {kept[workload]}"] if workload in kept else [])
        for strategy in strategies:
            if workload in scales and strategy in sequence.NOT_RESCALED:
                out += [Projection(workload, strategy, w, collectives.nodes_for(w, network.devices_per_node), "refused",
                                   reason=sequence.refusal(strategy, scales[workload])) for w in worlds]
                continue
            base = pick_base(cases, workload, strategy)
            if base is None:
                if strategy in ("fsdp", "pp", "tp"):
                    what = {"fsdp": "its wrap units", "pp": "its chain's units and their times",
                            "tp": "the share of compute its split divides and its all-reduces"}[strategy]
                    out += [Projection(workload, strategy, w, collectives.nodes_for(w, network.devices_per_node),
                                       "refused", reason=f"no {strategy} case in the file: {what} are measured, "
                                       f"not assumed (run ddpbench --strategy {strategy})") for w in worlds]
                continue
            at_one = projector.project(base, strategy, 1)
            for world in worlds:
                p = projector.attach_levers(projector.project(base, strategy, world), base, world)
                p.assumptions += notes
                if p.status == "projected" and at_one.samples_per_second:
                    p.scaling_efficiency = p.samples_per_second / (world * at_one.samples_per_second)
                    if p.scaling_efficiency > 1:
                        p.assumptions.append(over_100_percent(p))
                out.append(p)
                # tp's and pp's 2-D layouts with data parallelism (mesh.py), against the same world 1
                layouts = []
                if strategy == "tp":
                    layouts = [projector.project_layout(base, world, t, kind)
                               for t in tp_sizes(world, network.devices_per_node) for kind in LAYOUT_KINDS]
                elif strategy == "pp" and base.pipeline:
                    units = len(base.pipeline.get("unit_parameters") or [])
                    layouts = [projector.project_pp_layout(base, world, size, kind)
                               for size in pp_sizes(world, units) for kind in LAYOUT_KINDS]
                for layout in layouts:
                    if layout.status == "projected" and at_one.samples_per_second:
                        layout.scaling_efficiency = layout.samples_per_second / (world * at_one.samples_per_second)
                    out.append(layout)
    return out
