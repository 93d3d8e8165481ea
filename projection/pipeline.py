"""Step time and memory per device of pp at another world size, from one measured pp case: a pipeline
of W stages, one a rank, over the same chain of units and the same global batch (a pipeline splits
the model, not the batch).

What is measured is kept and only what changes is modelled:
- the cut: the chain cut again for W stages as ddpbench cuts it (balanced_split below is
  pipeline/balance.cpp's, ties and all) from the case's own figures, each unit's profiled
  forward + backward (`unit_profile_ms`) where it cut by time, its parameters where by params, the
  even cut where it cut evenly (a hand cut, --pp-split, is refused: it fits one stage count);
- a unit's time on a micro-batch: its profile, times how much longer the case's stages ran than
  their profile said (forward + backward measured over the profile's sum: a calibration, since
  the profile is the least of several passes of one unit alone), times the micro-batch's rows over
  the case's (linear in the rows);
- micro-batches: ddpbench's default for W stages (the most up to 2 W that divides the batch), or the
  case's --microbatches where it set them;
- the schedule's step: the slowest stage S_max once per micro-batch and every other stage once while
  the pipeline fills and drains, m S_max + (sum of the other stages), which for equal stages is
  (m + p - 1) S, the bubble's formula; plus one send per boundary forward and one back while it
  fills and drains, 2 (p - 1) hops (the steady state's sends overlap compute). naive: one batch
  through the stages in turn. interleaved-1f1b is not projected yet;
- a hop: the activation of one micro-batch (the case's rank 0 sent one per micro-batch: its bytes
  a step over its micro-batches, scaled by the rows) over the intra-node link, or the inter-node one
  where the pipeline spans nodes, latency plus bytes over the achievable bandwidth;
- the optimizer as the case measured it, times the largest stage's parameters over the case's
  largest; data and the residual as measured;
- memory per device: the parameters, gradients and optimizer state of the largest stage at the
  case's bytes per element, plus the activations of the micro-batches stage 0 holds at once (1F1B:
  min(m, p); GPipe: m) of its units, at the bytes per unit and row the case's rank 0 held beyond
  its parameters, gradients and optimizer state.
"""
from projection import collectives
from projection.model import Projection, ProjectionError


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


def default_microbatches(global_batch, stages):
    """pp's default: the most micro-batches up to 2 x stages that divide the batch (strategies/pp.cpp)."""
    for m in range(2 * stages, 0, -1):
        if global_batch % m == 0:
            return m
    return 1


def project_pp(projector, case, world):
    """The Projection of pp at `world` stages from the pp case `case` (projector: model.Projector)."""
    line = case.pipeline
    network = projector.network
    nodes = collectives.nodes_for(world, network.devices_per_node)

    def refused(reason):
        return Projection(case.workload, "pp", world, nodes, "refused", reason=reason, from_case=case.name)

    if case.strategy != "pp" or not line:
        return refused("pp is projected from a pp case: its chain's units and their times are measured, not assumed")
    schedule = line.get("schedule")
    if schedule not in ("naive", "gpipe", "1f1b"):
        return refused(f"{schedule} is not projected yet (naive, gpipe and 1f1b are)")
    units = line.get("unit_parameters") or []
    if not units:
        return refused(f"{case.name}'s file records no unit figures (unit_parameters): measure pp again")
    if world > len(units):
        return refused(f"{world} stages need a unit each, and the chain has {len(units)}")
    balance = line.get("balance")
    profile = line.get("unit_profile_ms")
    p0, m0 = int(line["stages"]), int(line["microbatches"])
    assumptions = []
    if balance == "time" and profile:
        costs = [t / 1e3 for t in profile]
        spans = balanced_split(costs, world)
    else:
        if balance == "split":
            return refused(f"{case.name} was cut by hand (--pp-split), which fits {p0} stages only")
        # No unit was timed: their times are taken in proportion to their parameters.
        costs = [float(u) for u in units]
        spans = balanced_split(costs, world) if balance == "params" else even_split(len(units), world)
        assumptions.append(f"pp: {case.name} timed no unit (--pp-balance {balance}): each unit's time taken in "
                           f"proportion to its parameters")
    calibration = _calibration(case, line, costs, p0, m0)
    m = default_microbatches(case.global_batch, world) if schedule != "naive" else 1
    if schedule != "naive" and case.settings.get("microbatches"):
        m = int(case.settings["microbatches"])
        if case.global_batch % m:
            return refused(f"--microbatches {m} does not divide the batch {case.global_batch}")
    rows_scale = (case.global_batch / m) / (case.global_batch / m0)
    contention = projector._relative_contention(case, world)
    stage = [s * calibration * rows_scale * contention for s in stage_sums(costs, spans)]
    # A hop: one micro-batch's activation (rank 0 sent one per micro-batch of the case).
    sent = case.point_to_point_bytes or 0.0
    hop_bytes = (sent / m0) * rows_scale if p0 > 1 else 0.0
    link = network.inter if nodes > 1 else network.intra
    hop = (link.alpha + network.base_latency + hop_bytes / link.achievable) if world > 1 else 0.0
    if p0 == 1 and world > 1:
        assumptions.append(f"pp: {case.name} ran one stage and sent nothing: hops taken as latency alone")
    if schedule == "naive":
        compute = sum(stage)
    else:
        compute = m * max(stage) + (sum(stage) - max(stage))
    comm = 2 * (world - 1) * hop
    stage_params = stage_sums([float(u) for u in units], spans)
    measured_params = max(line.get("stage_parameters") or [sum(units) / p0])
    optimizer = case.phase("optimizer") * max(stage_params) / measured_params * contention
    step = compute + comm + optimizer + case.phase("data") + case.phase("residual")
    assumptions.append(
        f"pp: {world} stage(s) cut by {balance if balance != 'even' else 'count'} from {case.name}'s {len(units)} "
        f"units, {m} micro-batch(es) of {case.global_batch / m:g} rows; a unit's time its profile x "
        f"{calibration:.2f} (the case's measured stages over their profile) x the rows; "
        f"{'one batch through the stages in turn' if schedule == 'naive' else 'm x the slowest stage + the others once'}"
        f" + 2 (p - 1) hops of {hop_bytes / 1024:.4g} KiB")
    p = projector._record(case, "pp", world, step, comm, comm, [f"point-to-point ({'inter' if nodes > 1 else 'intra'}-node)"],
                          assumptions)
    # A pipeline splits the model, not the batch: the global batch is the case's at every world.
    p.samples_per_second = case.global_batch / step
    p.assumptions.append(f"pp: the global batch as measured ({case.global_batch}) at every world, whatever --scaling")
    p.memory_per_device_bytes = _memory(case, line, units, spans, world, m, m0, p0, rows_scale, schedule)
    if p.memory_per_device_bytes is not None:
        p.assumptions.append("pp memory: the largest stage's parameters, gradients and optimizer state, plus stage 0's "
                             "activations in flight at the case's bytes per unit and row")
    return p


def _calibration(case, line, costs, p0, m0):
    """Seconds a unit of cost takes in the case's own stages: what its ranks computed a step (each
    rank's step less its waits, `compute_ms_by_rank`, less the data, the residual and its optimizer,
    rank 0's scaled by each stage's parameters) over m0 micro-batches of the units' costs. Where
    the file has no per-rank figures, rank 0's forward + backward over stage 0's costs."""
    spans = [tuple(s) for s in line["stage_units"]]
    busy = line.get("compute_ms_by_rank") or []
    params = line.get("stage_parameters") or []
    if len(busy) == p0 and len(params) == p0 and params[0] > 0:
        measured = sum(b / 1e3 - case.phase("data") - case.phase("residual")
                       - case.phase("optimizer") * params[r] / params[0] for r, b in enumerate(busy))
        cost = m0 * sum(costs)
    else:
        measured = case.phase("forward") + case.phase("backward")
        cost = m0 * stage_sums(costs, spans)[0]
    if measured <= 0 or cost <= 0:
        raise ProjectionError(f"{case.name}: no compute time to calibrate the pipeline's units by")
    return measured / cost


def _memory(case, line, units, spans, world, m, m0, p0, rows_scale, schedule):
    """Device 0's bytes at `world` stages (see the module's docstring), or None where the case's
    memory is not split by kind."""
    if not case.memory or not line.get("stage_parameters"):
        return None
    held0 = line["stage_parameters"][0]
    if held0 <= 0:
        return None
    per_element = (case.memory["parameter_bytes"] + case.memory["gradient_bytes"]
                   + case.memory["optimizer_state_bytes"]) / held0
    held = max(stage_sums([float(u) for u in units], spans)) * per_element
    units0 = line["stage_units"][0][1] - line["stage_units"][0][0]
    in_flight = (lambda mb, p: mb if schedule in ("gpipe", "naive") else min(mb, p))
    per_unit_microbatch = case.memory["other_bytes"] / max(1, units0 * in_flight(m0, p0))
    activations = per_unit_microbatch * rows_scale * (spans[0][1] - spans[0][0]) * in_flight(m, world)
    return held + activations
