"""Step time and memory per device of pp at another world size, from one measured pp case: a pipeline
of W ranks (W V stages under interleaved-1f1b, V chunks a rank as the case ran), over the same chain
of units and the same global batch (a pipeline splits the model, not the batch).

What is measured is kept and only what changes is modelled:
- the cut: the chain cut again for W V stages as ddpbench cuts it (balanced_split below is
  pipeline/balance.cpp's, ties and all) from the case's own figures, each unit's profiled
  forward + backward (`unit_profile_ms`) where it cut by time, its parameters where by params, the
  even cut where it cut evenly (a hand cut, --pp-split, is refused: it fits one stage count);
- a unit's time on a micro-batch: its profile, times how much longer the case's stages ran than
  their profile said (forward + backward measured over the profile's sum: a calibration, since
  the profile is the least of several passes of one unit alone), times the micro-batch's rows over
  the case's (linear in the rows), split into forward and backward as the case's rank 0 measured
  them;
- micro-batches: ddpbench's default for W ranks (the most up to 2 W V that divides the batch, a
  multiple of W under interleaved-1f1b), or the case's --microbatches where it set them;
- the step: the schedule itself played with these stage times (pipeline_schedule.py, a port of
  pipeline/schedule.cpp), every activation and gradient that crosses to another rank arriving a
  hop after it is sent. For equal stages and free hops that is (m + p - 1) stages under GPipe and
  1F1B, the bubble's formula, and (m + (p - 1) / V) a rank's work under interleaved; the hops add
  2 (p - 1) under GPipe, and more under 1F1B, whose steady state waits on a neighbour's gradient;
- a hop: one micro-batch's activation (what the case's rank 0 sent a step over the 2 V - 1 sends
  it makes a micro-batch, scaled by the rows) over the intra-node link, or the inter-node one where
  the pipeline spans nodes, latency plus bytes over the achievable bandwidth;
- the optimizer as the case measured it, times the largest rank's parameters over the case's
  largest; data and the residual as measured;
- memory per device: the parameters, gradients and optimizer state of the largest rank at the
  case's bytes per element, plus the activations rank 0 holds at once in the schedule played (GPipe:
  m micro-batches; 1F1B: min(m, p); interleaved: its warm-up and one, a chunk each), at the bytes
  per unit and row the case's rank 0 held beyond its parameters, gradients and optimizer state.
"""
from projection import collectives, pipeline_schedule
from projection.cases import Projection, ProjectionError
from projection.pipeline_schedule import SCHEDULES


def even_split(units, stages):
    """ddpbench's even cut: as many units a stage, the earlier stages one more where they do not divide."""
    base, extra = divmod(units, stages)
    spans, begin = [], 0
    for k in range(stages):
        end = begin + base + (1 if k < extra else 0)
        spans.append((begin, end))
        begin = end
    return spans


def balanced_split(costs, stages):
    """pipeline/balance.cpp's cut of a chain of unit costs into contiguous stages: the least largest
    stage, then the most even unit counts (least sum of squared counts), then more units early."""
    n = len(costs)
    if stages < 1 or n < stages:
        raise ValueError(f"{stages} stages need a unit each, and the chain has {n}")
    prefix = [0.0]
    for c in costs:
        prefix.append(prefix[-1] + c)
    inf = float("inf")

    def less(a, b):
        return a < b - 1e-12 * max(abs(a), abs(b))

    # best[k][i]: (largest, spread, from) for the first i units in k stages
    best = [[(inf, inf, 0) for _ in range(n + 1)] for _ in range(stages + 1)]
    best[0][0] = (0.0, 0.0, 0)
    for k in range(1, stages + 1):
        for i in range(k, n - (stages - k) + 1):
            for j in range(k - 1, i):
                before = best[k - 1][j]
                if before[0] == inf:
                    continue
                largest = max(before[0], prefix[i] - prefix[j])
                spread = before[1] + (i - j) ** 2
                here = best[k][i]
                if less(largest, here[0]) or (not less(here[0], largest) and spread <= here[1]):
                    best[k][i] = (largest, spread, j)
    spans, end = [None] * stages, n
    for k in range(stages, 0, -1):
        begin = best[k][end][2]
        spans[k - 1] = (begin, end)
        end = begin
    return spans


def stage_sums(costs, spans):
    return [sum(costs[b:e]) for b, e in spans]


def default_microbatches(global_batch, ranks, chunks=1, interleaved=False):
    """pp's default (strategies/pp.cpp's shape_for): the most micro-batches up to 2 p V that divide the
    batch, a multiple of p under interleaved-1f1b; None where none does."""
    step = ranks if interleaved else 1
    for m in range(2 * ranks * chunks, step - 1, -1):
        if m % step == 0 and global_batch % m == 0:
            return m
    return None


def rank_stages(rank, ranks, chunks):
    """The stages rank `rank` holds: rank, rank + p, ... (one under every schedule but interleaved)."""
    return [chunk * ranks + rank for chunk in range(chunks)]


def project_pp(projector, case, world):
    """The Projection of pp at `world` ranks from the pp case `case` (projector: model.Projector)."""
    return project_pp_and_largest_rank(projector, case, world)[0]


def project_pp_and_largest_rank(projector, case, world):
    """project_pp's Projection, and the largest rank's parameters (elements) in the cut it projected
    (None where it was refused): what a data-parallel dimension over the pipelines reduces (mesh.py)."""
    line = case.pipeline
    network = projector.network
    nodes = collectives.nodes_for(world, network.devices_per_node)

    def refused(reason):
        return Projection(case.workload, "pp", world, nodes, "refused", reason=reason, from_case=case.name), None

    if case.strategy != "pp" or not line:
        return refused("pp is projected from a pp case: its chain's units and their times are measured, not assumed")
    if case.mesh:
        # Its world is the mesh's, its batch the pipelines' together: read as one pipeline, both would lie.
        return refused(f"{case.name} ran on the mesh {case.mesh} (--mesh), which is not projected yet: "
                       "project pp from a run without --mesh")
    schedule = line.get("schedule")
    if schedule not in SCHEDULES:
        return refused(f"{case.name}'s schedule {schedule!r} is none of {', '.join(SCHEDULES)}")
    units = line.get("unit_parameters") or []
    if not units:
        return refused(f"{case.name}'s file records no unit figures (unit_parameters): measure pp again")
    chunks = int(line.get("chunks_per_rank") or 1)
    stages = world * chunks
    if stages > len(units):
        return refused(f"{world} rank(s) x {chunks} chunk(s) make {stages} stages, which need a unit each, "
                       f"and the chain has {len(units)}")
    balance = line.get("balance")
    profile = line.get("unit_profile_ms")
    p0, m0 = int(line["stages"]) // chunks, int(line["microbatches"])
    assumptions = []
    if balance == "time" and profile:
        costs = [t / 1e3 for t in profile]
        spans = balanced_split(costs, stages)
    else:
        if balance == "split":
            return refused(f"{case.name} was cut by hand (--pp-split), which fits {p0} rank(s) only")
        # No unit was timed: their times are taken in proportion to their parameters.
        costs = [float(u) for u in units]
        spans = balanced_split(costs, stages) if balance == "params" else even_split(len(units), stages)
        assumptions.append(f"pp: {case.name} timed no unit (--pp-balance {balance}): each unit's time taken in "
                           f"proportion to its parameters")
    calibration = _calibration(case, line, costs, p0, chunks, m0)
    interleaved = schedule == "interleaved-1f1b"
    if schedule == "naive":
        m = 1
    elif case.settings.get("microbatches"):
        m = int(case.settings["microbatches"])
        if case.global_batch % m:
            return refused(f"--microbatches {m} does not divide the batch {case.global_batch}")
        if interleaved and m % world:
            return refused(f"interleaved-1f1b takes micro-batches in groups of the {world} ranks: "
                           f"--microbatches {m} is not a multiple of it")
    else:
        m = default_microbatches(case.global_batch, world, chunks, interleaved)
        if m is None:
            return refused(f"no multiple of {world} micro-batches up to {2 * stages} divides the batch "
                           f"{case.global_batch}, as interleaved-1f1b needs")
    rows_scale = m0 / m
    contention = projector.relative_contention(case, world)
    stage = [s * calibration * rows_scale * contention for s in stage_sums(costs, spans)]
    forward_share = _forward_share(case)
    # A hop: one micro-batch's activation or its gradient. The case's rank 0 sent, each micro-batch,
    # its V chunks' outputs and the input gradients of its chunks past the first: 2 V - 1 of them.
    sent = case.point_to_point_bytes or 0.0
    hop_bytes = sent / (m0 * (2 * chunks - 1)) * rows_scale if p0 > 1 else 0.0
    link = network.inter if nodes > 1 else network.intra
    hop = (link.alpha + network.base_latency + hop_bytes / link.achievable) if world > 1 else 0.0
    if p0 == 1 and world > 1:
        assumptions.append(f"pp: {case.name} ran one rank and sent nothing: hops taken as latency alone")

    def play(hop_s):
        return pipeline_schedule.simulate(schedule, world, m, [s * forward_share for s in stage],
                                          [s * (1 - forward_share) for s in stage], hop_s, chunks)

    timeline, compute_only = play(hop), play(0.0)
    # What the hops add to the step: the fill and drain's, and where a schedule waits on a neighbour's
    # gradient in its steady state (1F1B), those too.
    exposed = timeline.step_s - compute_only.step_s
    ranks_parameters = [sum(stage_sums([float(u) for u in units], [spans[k] for k in rank_stages(r, world, chunks)]))
                        for r in range(world)]
    measured_params = max(_rank_parameters(line, p0, chunks) or [sum(units) / p0])
    optimizer = case.phase("optimizer") * max(ranks_parameters) / measured_params * contention
    step = timeline.step_s + optimizer + case.phase("data") + case.phase("residual")
    assumptions.append(
        f"pp: {schedule}, {world} rank(s) x {chunks} chunk(s) cut by {balance if balance != 'even' else 'count'} from "
        f"{case.name}'s {len(units)} units, {m} micro-batch(es) of {case.global_batch / m:g} rows; a unit's time its "
        f"profile x {calibration:.2f} (the case's measured stages over their profile) x the rows, "
        f"{forward_share:.0%} of it forward; the schedule played with these times and a hop of {hop_bytes / 1024:.4g} KiB "
        f"on each dependency between ranks (bubble {compute_only.bubble:.0%} without the hops)")
    p = projector.record(case, "pp", world, step, exposed, exposed,
                         [f"point-to-point ({'inter' if nodes > 1 else 'intra'}-node)"], assumptions)
    # A pipeline splits the model, not the batch: the global batch is the case's at every world.
    p.samples_per_second = case.global_batch / step
    p.assumptions.append(f"pp: the global batch as measured ({case.global_batch}) at every world, whatever --scaling")
    p.memory_per_device_bytes = _memory(case, line, units, spans, world, chunks, m, m0, p0, rows_scale, schedule,
                                        timeline, max(ranks_parameters))
    if p.memory_per_device_bytes is not None:
        p.assumptions.append("pp memory: the largest rank's parameters, gradients and optimizer state, plus the "
                             "activations rank 0 holds at once in the schedule played, at the case's bytes per "
                             "unit and row")
    return p, max(ranks_parameters)


def _forward_share(case):
    """Forward's share of a unit's forward + backward, as the case's rank 0 measured them (a third,
    backward's usual two matmuls to forward's one, where it measured neither)."""
    forward, backward = case.phase("forward"), case.phase("backward")
    return forward / (forward + backward) if forward > 0 and backward > 0 else 1 / 3


def bytes_per_parameter(case):
    """The case's rank 0's parameter, gradient and optimizer-state bytes per parameter it held, or
    None where its memory is not split by kind."""
    line = case.pipeline or {}
    chunks = int(line.get("chunks_per_rank") or 1)
    held0 = (_rank_parameters(line, int(line.get("stages") or 0) // chunks, chunks) or [0])[0]
    if not case.memory or held0 <= 0:
        return None
    return {k: case.memory[k] / held0 for k in ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")}


def _rank_parameters(line, ranks, chunks):
    """Each rank's parameters in the case (the sum of its chunks' stages), or None."""
    per_stage = line.get("stage_parameters") or []
    if len(per_stage) != ranks * chunks:
        return None
    return [sum(per_stage[k] for k in rank_stages(r, ranks, chunks)) for r in range(ranks)]


def _calibration(case, line, costs, p0, chunks, m0):
    """Seconds a unit of cost takes in the case's own stages: what its ranks computed a step (each
    rank's step less its waits, `compute_ms_by_rank`, less the data, the residual and its optimizer,
    rank 0's scaled by each rank's parameters) over m0 micro-batches of the units' costs. Where
    the file has no per-rank figures, rank 0's forward + backward over its stages' costs."""
    spans = [tuple(s) for s in line["stage_units"]]
    busy = line.get("compute_ms_by_rank") or []
    params = _rank_parameters(line, p0, chunks)
    if len(busy) == p0 and params and params[0] > 0:
        measured = sum(b / 1e3 - case.phase("data") - case.phase("residual")
                       - case.phase("optimizer") * params[r] / params[0] for r, b in enumerate(busy))
        cost = m0 * sum(costs)
    else:
        measured = case.phase("forward") + case.phase("backward")
        cost = m0 * sum(stage_sums(costs, [spans[k] for k in rank_stages(0, p0, chunks)]))
    if measured <= 0 or cost <= 0:
        raise ProjectionError(f"{case.name}: no compute time to calibrate the pipeline's units by")
    return measured / cost


def _memory(case, line, units, spans, world, chunks, m, m0, p0, rows_scale, schedule, timeline, largest_rank):
    """Device 0's bytes at `world` ranks (see the module's docstring), or None where the case's
    memory is not split by kind."""
    held0 = (_rank_parameters(line, p0, chunks) or [0])[0]
    if not case.memory or held0 <= 0:
        return None
    per_element = (case.memory["parameter_bytes"] + case.memory["gradient_bytes"]
                   + case.memory["optimizer_state_bytes"]) / held0
    # Rank 0's units a chunk, on average, in the case and at `world`; the chunk forwards it holds at
    # once, as the schedule played says (GPipe: m; 1F1B: min(m, p); interleaved: its warm-up + 1).
    case_spans = [tuple(s) for s in line["stage_units"]]
    case_units0 = sum(e - b for b, e in (case_spans[k] for k in rank_stages(0, p0, chunks))) / chunks
    units0 = sum(e - b for b, e in (spans[k] for k in rank_stages(0, world, chunks))) / chunks
    case_in_flight = pipeline_schedule.simulate(schedule, p0, m0, [1.0] * (p0 * chunks), [2.0] * (p0 * chunks),
                                                0.0, chunks).peak_in_flight[0]
    per_unit_microbatch = case.memory["other_bytes"] / max(1.0, case_units0 * case_in_flight)
    activations = per_unit_microbatch * rows_scale * units0 * timeline.peak_in_flight[0]
    return largest_rank * per_element + activations
