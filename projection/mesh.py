"""2-D layouts projected from a 1-D tp case and single's (ddpbench-project): `dp=D,tp=T` and
`fsdp=D,tp=T` at world D x T, torchtitan's layouts with tensor parallelism inside a node and data
parallelism across them, for every T of a world that keeps its tp group inside a node and leaves a
data-parallel dimension of 2 or more.

What tensor_parallel.py projects for tp at T is kept for each tp group (the share of compute its
split divides, its all-reduces over the group at T), and what the dp dimension adds is modelled:
- the batch: each of the D groups trains on the case's global batch (weak scaling: D times it in
  all); under strong scaling a mesh is not projected (its per-group batch would need the tp case's
  collectives re-sized, which they are not yet);
- the dp all-reduce of the gradients a rank holds (single's gradient bytes at tp's held share) over
  its dp group: D ranks, one in each of D tp groups, so dp_node = devices_per_node / T of them a
  node, and the T dp groups of a node run at once, sharing its NICs (each gets 1/T of them);
- that all-reduce overlaps backward, as ddp's buckets do: only the part longer than the tp group's
  backward is exposed (an optimistic bound: ddp's last bucket waits for the end of backward), except
  on a network whose transport runs on the compute cores (Gloo over a host's loopback), where it is
  all exposed and slowed as tp's collectives are;
- memory per device: tp's at T, plus a second copy of the held gradients in ddp's buckets.
On fsdp=D,tp=T the fsdp dimension instead all-gathers what a rank holds twice a step (forward, and
again for backward: units resharded after forward, the default) and reduce-scatters its gradients,
over the same D ranks with the same shares of the NICs; those collectives overlap the group's
compute (prefetched gathers, reduce-scatters behind backward) and only what outlasts it is exposed,
again an optimistic bound. Memory per device: tp's parameters, gradients and optimizer state at
1/D, plus all of a rank's held parameters gathered at once (an upper bound: fsdp gathers a unit or
two at a time, and a tp case does not say its units), plus tp's measured rest.
Not projected: a tp case that ran on a mesh itself (it is refused in tensor_parallel.py).

`dp=D,pp=P` and `fsdp=D,pp=P` are projected from a 1-D pp case: each of the D pipelines as
pipeline.py projects pp at P (on the case's global batch: weak scaling, as there), its compute
slowed by the contention of the mesh's world against P's, plus what ddpbench adds after the
pipeline's last backward, none of it hidden: on dp an all-reduce of the largest rank's gradients
over its D ranks, on fsdp an all-gather of its parameters as the step begins and a reduce-scatter of
its gradients, each over a dp group whose ranks share their node's NICs with the other stages'
groups there. Memory per device: pp's at P; on fsdp its parameters, gradients and optimizer state
less the optimizer state's (D - 1)/D (the stage is gathered whole for the step, its gradients
accumulated whole, and the chunks kept beside them).
"""
from dataclasses import replace

from projection import collectives, pipeline, tensor_parallel
from projection.cases import Projection


def tp_sizes(world, devices_per_node):
    """The tp sizes of `world`'s 2-D layouts: powers of two from 2, a group inside a node, and a dp
    dimension of 2 or more."""
    sizes, t = [], 2
    while t <= devices_per_node and world // t >= 2:
        if world % t == 0 and devices_per_node % t == 0:
            sizes.append(t)
        t *= 2
    return sizes


KINDS = ("dp", "fsdp")


def layout_name(kind, size, tp):
    return f"{kind}={size},tp={tp}"


def project_dp_tp(projector, case, world, single, t, kind="dp"):
    """`dp=world/t,tp=t` (or fsdp=..., `kind`) from `case` (1-D tp at t_m >= 2) and `single`: a
    Projection named by its layout."""
    d = world // t
    name = layout_name(kind, d, t)
    nodes = collectives.nodes_for(world, projector.network.devices_per_node)
    refused = lambda why: Projection(case.workload, name, world, nodes, "refused", from_case=case.name,  # noqa: E731
                                     reason=why)
    if projector.scaling != "weak":
        return refused("a mesh is projected under weak scaling only (each dp group on the case's global batch)")
    one_d = tensor_parallel.project_tp(projector, case, t, single)
    if one_d.status != "projected":
        return refused(one_d.reason)
    if not single.memory or not single.memory.get("gradient_bytes"):
        return refused(f"{single.name} has no gradient bytes in the file (memory by kind): the dp dimension's "
                       "all-reduce is sized by them")
    compute_share, parameter_share = tensor_parallel.split_shares(projector, case, single)
    held = 1 - parameter_share + parameter_share / t
    gradients = single.memory["gradient_bytes"] * held
    # The T data-parallel groups of a node: devices_per_node / T ranks of each there, all T at once on
    # its NICs.
    net = projector.network
    dp_net = replace(net, devices_per_node=max(1, net.devices_per_node // t), nics_per_node=net.nics_per_node / t)
    contention = projector.relative_contention(single, world)
    backward = single.phase("backward") * (1 - compute_share + compute_share / t) * contention
    # tp's step at T, its contention then taken at the mesh's world (more ranks a node compute at once).
    compute = (tensor_parallel._compute(single) * (1 - compute_share + compute_share / t)
               + single.phase("optimizer") * held / (d if kind == "fsdp" else 1)) * contention
    tp_comm = one_d.comm_ms / 1e3
    if kind == "fsdp":
        parameters = single.memory.get("parameter_bytes", single.memory["gradient_bytes"]) * held
        gather = collectives.all_gather(dp_net, parameters, d)
        scatter = collectives.reduce_scatter(dp_net, gradients, d)
        data_parallel_s, algorithms = 2 * gather.seconds + scatter.seconds, [gather.algorithm, scatter.algorithm]
        hidden_under = compute
        what = (f"two all-gathers of the {parameters / 2**20:.3g} MiB of parameters a rank holds and a "
                f"reduce-scatter of its gradients over {d} ranks ({data_parallel_s * 1e3:.3g} ms, the {t} fsdp groups "
                f"of a node sharing its NICs), overlapped with the group's compute ({compute * 1e3:.3g} ms)")
    else:
        allreduce = collectives.allreduce(dp_net, gradients, d)
        data_parallel_s, algorithms = allreduce.seconds, [allreduce.algorithm]
        hidden_under = backward
        what = (f"the dp all-reduce of the {gradients / 2**20:.3g} MiB of gradients a rank holds over {d} ranks "
                f"({allreduce.algorithm}, {allreduce.seconds * 1e3:.3g} ms, the {t} dp groups of a node sharing its "
                f"NICs), overlapped with the group's backward ({backward * 1e3:.3g} ms)")
    # Slowed as tp's collectives are where the node's cores carry them (Gloo over loopback), and
    # then not hidden at all: the cores that would compute are the ones copying the bytes.
    data_parallel_s *= projector.comm_scale(single, world)
    if net.transport_on_compute_cores:
        hidden_under = 0.0
        what += ", which cannot hide it: this network's transport runs on the cores that compute"
    exposed = max(0.0, data_parallel_s - hidden_under)
    step = case.phase("data") + compute + tp_comm + exposed + case.phase("residual")
    assumptions = [
        f"{name}: tp over each group of {t} as tp at world {t} projects it ({compute_share:.0%} of {single.name}'s "
        f"compute split, {tp_comm * 1e3:.3g} ms of all-reduces a step, all exposed); each of the {d} {kind} groups "
        f"on the case's global batch of {case.global_batch}",
        f"{name}: {what}: {exposed * 1e3:.3g} ms exposed, an optimistic bound"]
    p = projector.record(case, name, world, step, tp_comm + data_parallel_s, tp_comm + exposed,
                         list(one_d.algorithms) + algorithms, assumptions)
    p.samples_per_second = d * case.global_batch / step
    if one_d.memory_per_device_bytes is not None:
        if kind == "fsdp":
            kinds = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")
            model_bytes = sum(single.memory[k] for k in kinds) * held
            rest = one_d.memory_per_device_bytes - model_bytes  # tp's measured rest (activations, buffers)
            p.memory_per_device_bytes = model_bytes / d + parameters + rest
            p.assumptions.append(f"{name} memory: tp's parameters, gradients and optimizer state at 1/{d}, all of a "
                                 "rank's parameters gathered at once (an upper bound) and tp's measured rest")
        else:
            p.memory_per_device_bytes = one_d.memory_per_device_bytes + gradients  # ddp's buckets: a second copy
    return p


def pp_sizes(world, chain_units):
    """The pipeline sizes of `world`'s 2-D layouts with pp: powers of two from 2, no more stages than
    the chain has units, and a data-parallel dimension of 2 or more."""
    sizes, p = [], 2
    while p <= chain_units and world // p >= 2:
        if world % p == 0:
            sizes.append(p)
        p *= 2
    return sizes


def project_dp_pp(projector, case, world, p, kind="dp"):
    """`dp=world/p,pp=p` (or fsdp=..., `kind`) from `case` (1-D pp): a Projection named by its layout."""
    d = world // p
    name = f"{kind}={d},pp={p}"
    net = projector.network
    nodes = collectives.nodes_for(world, net.devices_per_node)
    refused = lambda why: Projection(case.workload, name, world, nodes, "refused", from_case=case.name,  # noqa: E731
                                     reason=why)
    if projector.scaling != "weak":
        return refused("a mesh is projected under weak scaling only (each pipeline on the case's global batch)")
    one_d, largest = pipeline.project_pp_and_largest_rank(projector, case, p)
    if one_d.status != "projected":
        return refused(one_d.reason)
    per = pipeline.bytes_per_parameter(case)
    if per is None:
        return refused(f"{case.name} has no memory by kind in the file: the {kind} dimension's collectives are sized "
                       "by the stage's parameter and gradient bytes")
    parameters, gradients, optimizer = (largest * per[k] for k in ("parameter_bytes", "gradient_bytes",
                                                                   "optimizer_state_bytes"))
    # A node holds devices_per_node / P ranks of each of its P stages' groups, all on its NICs at
    # once; a pipeline longer than a node leaves one rank of each group a node.
    groups_a_node = min(p, net.devices_per_node)
    dp_net = replace(net, devices_per_node=max(1, net.devices_per_node // p), nics_per_node=net.nics_per_node / groups_a_node)
    contention = projector.relative_contention(case, world) / projector.relative_contention(case, p)
    pipeline_s = one_d.step_ms / 1e3 * contention
    if kind == "fsdp":
        gather = collectives.all_gather(dp_net, parameters, d)
        scatter = collectives.reduce_scatter(dp_net, gradients, d)
        data_parallel_s, algorithms = gather.seconds + scatter.seconds, [gather.algorithm, scatter.algorithm]
        what = (f"an all-gather of the largest stage's {parameters / 2**20:.3g} MiB of parameters as the step begins "
                f"and a reduce-scatter of its gradients after the schedule, over {d} ranks")
    else:
        allreduce = collectives.allreduce(dp_net, gradients, d)
        data_parallel_s, algorithms = allreduce.seconds, [allreduce.algorithm]
        what = f"an all-reduce of the largest stage's {gradients / 2**20:.3g} MiB of gradients after the schedule over {d} ranks"
    data_parallel_s *= projector.comm_scale(case, world)
    step = pipeline_s + data_parallel_s
    assumptions = list(one_d.assumptions) + [
        f"{name}: each of the {d} pipelines as pp at world {p} projects it, on the case's global batch of "
        f"{case.global_batch}, its compute slowed {contention:.2f}x (the contention of {world} ranks against {p})",
        f"{name}: {what} ({data_parallel_s * 1e3:.3g} ms, the {groups_a_node} {kind} groups of a node sharing its "
        "NICs), all exposed: ddpbench runs it after the pipeline's last backward"]
    out = projector.record(case, name, world, step, (one_d.comm_ms or 0) / 1e3 + data_parallel_s,
                           (one_d.exposed_comm_ms or 0) / 1e3 + data_parallel_s, list(one_d.algorithms) + algorithms,
                           assumptions)
    out.samples_per_second = d * case.global_batch / step
    if one_d.memory_per_device_bytes is not None:
        out.memory_per_device_bytes = one_d.memory_per_device_bytes
        if kind == "fsdp":
            out.memory_per_device_bytes += (parameters + gradients + optimizer) / d - optimizer
            out.assumptions.append(f"{name} memory: pp's at {p}, the stage's optimizer state at 1/{d} and its "
                                   "parameter and gradient chunks beside the whole stage gathered for the step")
    return out
