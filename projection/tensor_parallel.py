"""Step time and memory per device of tp at another tensor-parallel size t, from one measured tp case
and the `single` case of the same workload in the same file: t ranks, the same global batch on each
(tensor parallelism splits the model, not the batch), the planned layers split t ways.

What is measured is kept and only what changes is modelled:
- the share of compute that the split divides, s: from the two cases' compute (forward and
  backward; tp's all-reduces are a phase of their own): tp at t_m computed C (1 - s + s / t_m) where single
  computed C, so s = (1 - tp / single) / (1 - 1 / t_m), held to [0, 1]. It holds what tp costs
  beside the products (the copies around its all-reduces), and it is the split layers' share of
  the time, not of the parameters (gpt2's tied output projection, held whole, is a quarter of its
  products and a third of its parameters);
- compute at t: single's, times (1 - s + s / t), times how many ranks of a node compute at once
  beyond its compute slots (CPU virtual devices share cores);
- communication: the case's all-reduces, as many a step and as large (activation-sized: a block's
  output, the same at every t), each over the tensor-parallel group at t (collectives.py's
  all-reduce over the network: ring or tree, across nodes where t spans them), all of it exposed
  (each sits on the critical path between two layers); under --sequence-parallel its
  reduce-scatters and all-gathers alike, each of the whole buffer the case counted (a share of the
  sequence a rank, so the same whole at every t);
- the optimizer: single's, times the share of the parameters a rank holds at t (from the two cases'
  parameter bytes where the file splits memory by kind, else the compute share s); data and the
  residual as measured in the tp case;
- memory per device: parameters, gradients and optimizer state at that share of single's, plus the
  tp case's measured rest (activations are whole on every rank without sequence parallelism).
"""
from projection import collectives
from projection.cases import Projection, ProjectionError


def _compute(case):
    return case.phase("forward") + case.phase("backward")


def split_shares(projector, case, single):
    """(s, p): the share of single's compute and of its parameters that the tp case's t_m ranks split."""
    t = case.world
    if t < 2:
        raise ProjectionError(f"{case.name}: tp is projected from a case at world 2 or more (it split nothing)")
    whole = _compute(single)
    if whole <= 0:
        raise ProjectionError(f"{single.name}: no forward or backward time to scale tp's compute from")
    # tp's ranks computed beside one another, slowed where they outnumbered a node's compute slots
    # (its all-reduces are a phase of their own, comm_exposed, outside forward and backward).
    mine = _compute(case) / projector.relative_contention(single, t)
    compute_share = min(1.0, max(0.0, (1 - mine / whole) / (1 - 1 / t)))
    parameter_share = compute_share
    if case.memory and single.memory and single.memory["parameter_bytes"] > 0:
        held = case.memory["parameter_bytes"] / single.memory["parameter_bytes"]
        parameter_share = min(1.0, max(0.0, (1 - held) / (1 - 1 / t)))
    return compute_share, parameter_share


def project_tp(projector, case, world, single):
    """tp at tensor-parallel size `world`, from `case` (tp at t_m >= 2) and `single` (the same workload)."""
    nodes = collectives.nodes_for(world, projector.network.devices_per_node)
    if case.mesh:
        # Its world is the mesh's and its comm object the tp group's: read as 1-D tp, both would lie.
        return Projection(case.workload, "tp", world, nodes, "refused", from_case=case.name,
                          reason=f"{case.name} ran on the mesh {case.mesh} (--mesh), which is not projected yet: "
                                 "project tp from a run without --mesh")
    if single is None:
        return Projection(case.workload, "tp", world, nodes, "refused", from_case=case.name,
                          reason="tp is projected from its case and single's in the same file (the share of "
                                 "compute its split divides): run ddpbench --strategy single,tp")
    compute_share, parameter_share = split_shares(projector, case, single)
    scatters, gathers = case.reduce_scatters or (0, 0.0), case.all_gathers or (0, 0.0)
    collectives_a_step = (case.comm_collectives or 0) - scatters[0] - gathers[0]  # the all-reduces
    if collectives_a_step <= 0 or not case.comm_bytes_per_step:
        raise ProjectionError(f"{case.name}: no all-reduce count or bytes in the file's comm object")
    each = case.comm_bytes_per_step / collectives_a_step
    one = collectives.allreduce(projector.network, each, world)
    seconds = one.seconds * collectives_a_step
    kinds = [f"{collectives_a_step} all-reduce(s) a step of {each / 2**20:.2f} MiB each"]
    for (count, nbytes), cost, name in ((scatters, collectives.reduce_scatter, "reduce-scatter"),
                                        (gathers, collectives.all_gather, "all-gather")):
        if count:
            seconds += cost(projector.network, nbytes / count, world).seconds * count
            kinds.append(f"{count} {name}(s) of {nbytes / count / 2**20:.2f} MiB")
    comm = seconds * projector.comm_scale(single, world)
    held = 1 - parameter_share + parameter_share / world
    contention = projector.relative_contention(single, world)
    step = (case.phase("data") + (_compute(single) * (1 - compute_share + compute_share / world)
                                  + single.phase("optimizer") * held) * contention
            + comm + case.phase("residual"))
    assumptions = [
        f"tp: {compute_share:.0%} of {single.name}'s compute split over the group (from {case.name}'s compute "
        f"against it), {parameter_share:.0%} of its parameters; the global batch as measured on every rank",
        f"tp: {', '.join(kinds)}, as {case.name} made them, all exposed"]
    p = projector.record(case, "tp", world, step, comm, comm, [one.algorithm], assumptions)
    # tp splits the model, not the batch: the global batch is the case's at every world (as pp's).
    p.samples_per_second = case.global_batch / step
    if single.memory and case.memory:
        kinds = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")
        p.memory_per_device_bytes = sum(single.memory[k] for k in kinds) * held + case.memory["other_bytes"]
    return p
