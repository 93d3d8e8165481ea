"""ddpbench-project's 2-D layouts (projection/mesh.py): which tp sizes a world's layouts take; dp=D,tp=T
from a 1-D tp case and single's, its dp all-reduce over the dp group with the node's NICs shared by
its T groups and hidden under backward up to backward's length; fsdp=D,tp=T's gathers and
reduce-scatter hidden under compute, and its memory; refusals; and the layouts ranked beside the
1-D strategies under --device-memory."""
from dataclasses import replace

import pytest

from projection import answers, collectives, mesh, model, tensor_parallel  # noqa: E402
from tp_cases import MIB, MS, case, net  # noqa: E402

@pytest.mark.parametrize("world, devices_per_node, sizes", [
    (8, 8, [2, 4]), (64, 8, [2, 4, 8]), (4, 8, [2]), (2, 8, []), (12, 4, [2, 4]), (16, 2, [2]), (6, 8, [2])])
def test_a_worlds_layouts_keep_tp_in_a_node_and_leave_a_dp_dimension(world, devices_per_node, sizes):
    assert mesh.tp_sizes(world, devices_per_node) == sizes


def single_tp_and_projector(backward_ms, params):
    """single and a tp case at world 2 splitting 80% of it, with a projector onto 8 ranks a node and
    8 NICs, for the layouts' formula tests."""
    single = case("single", 1, 4.0, backward_ms, optimizer_ms=2.0, params=params)
    tp = case("tp", 2, 2.4, backward_ms * 0.6, comm_ms=5.0, params=params * 0.6, collectives_a_step=4,
              comm_bytes=4 * MIB)
    projector = model.Projector(net(nics=8))
    projector.singles["w"] = single
    return single, tp, projector


@pytest.mark.parametrize("backward_ms, params", [(6.0, 1000.0), (0.001, 4e9)])
def test_a_layout_is_tp_at_its_size_plus_the_dp_all_reduce_past_backward(backward_ms, params):
    # 8 ranks a node, world 16: dp=4,tp=4 puts 2 ranks of each dp group on a node, and a node's 4 dp
    # groups share its 8 NICs. The second case's gradients (4 GB) outlast a backward of 1 us.
    single, tp, projector = single_tp_and_projector(backward_ms, params)
    p = mesh.project_dp_tp(projector, tp, 16, single, 4)
    assert p.status == "projected" and p.strategy == "dp=4,tp=4" and p.world == 16 and p.nodes == 2
    s, share = tensor_parallel.split_shares(projector, tp, single)
    held = 1 - share + share / 4
    one_d = tensor_parallel.project_tp(projector, tp, 4, single)
    dp = collectives.allreduce(net(devices_per_node=2, nics=2), params * held, 4)
    compute = (4.0 + backward_ms) * MS * (1 - s + s / 4) + 2 * MS * held
    exposed = max(0.0, dp.seconds - backward_ms * MS * (1 - s + s / 4))
    assert p.step_ms == pytest.approx((0.5 * MS + compute + one_d.comm_ms / 1e3 + exposed + 0.1 * MS) * 1e3)
    assert p.exposed_comm_ms == pytest.approx(one_d.comm_ms + exposed * 1e3)
    assert p.comm_ms == pytest.approx(one_d.comm_ms + dp.seconds * 1e3)
    assert p.samples_per_second == pytest.approx(4 * 32 / (p.step_ms / 1e3))  # 4 groups, each the case's batch
    assert p.memory_per_device_bytes == pytest.approx(one_d.memory_per_device_bytes + params * held)
    if params > 1e9:
        assert exposed > 0, "4 GB of gradients cannot hide under a backward of 1 us"
    else:
        assert exposed == 0


@pytest.mark.parametrize("backward_ms, params", [(6.0, 1000.0), (0.001, 4e9)])
def test_an_fsdp_layout_gathers_twice_and_reduce_scatters_past_the_groups_compute(backward_ms, params):
    single, tp, projector = single_tp_and_projector(backward_ms, params)
    p = mesh.project_dp_tp(projector, tp, 16, single, 4, kind="fsdp")
    assert p.status == "projected" and p.strategy == "fsdp=4,tp=4"
    s, share = tensor_parallel.split_shares(projector, tp, single)
    held = 1 - share + share / 4
    one_d = tensor_parallel.project_tp(projector, tp, 4, single)
    dp_net = net(devices_per_node=2, nics=2)
    fsdp = (2 * collectives.all_gather(dp_net, params * held, 4).seconds
            + collectives.reduce_scatter(dp_net, params * held, 4).seconds)
    compute = (4.0 + backward_ms) * MS * (1 - s + s / 4) + 2 * MS * held / 4  # the optimizer steps a quarter
    exposed = max(0.0, fsdp - compute)
    assert p.step_ms == pytest.approx((0.5 * MS + compute + one_d.comm_ms / 1e3 + exposed + 0.1 * MS) * 1e3)
    assert p.comm_ms == pytest.approx(one_d.comm_ms + fsdp * 1e3)
    assert p.samples_per_second == pytest.approx(4 * 32 / (p.step_ms / 1e3))
    held_model = 4 * params * held  # parameters, gradients, 2x optimizer state
    rest = one_d.memory_per_device_bytes - held_model
    assert p.memory_per_device_bytes == pytest.approx(held_model / 4 + params * held + rest)
    assert (exposed > 0) == (params > 1e9)
    # Beside dp=4,tp=4: less memory (the model at a quarter), and the same compute but the optimizer's.
    dp = mesh.project_dp_tp(projector, tp, 16, single, 4)
    assert p.memory_per_device_bytes < dp.memory_per_device_bytes


def test_a_layout_is_refused_under_strong_scaling_and_without_singles_gradient_bytes():
    single = case("single", 1, 4.0, 6.0)
    tp = case("tp", 2, 2.4, 3.6, comm_ms=5.0, params=600.0, collectives_a_step=4, comm_bytes=4 * MIB)
    strong = model.Projector(net(), scaling="strong")
    strong.singles["w"] = single
    p = mesh.project_dp_tp(strong, tp, 16, single, 4)
    assert p.status == "refused" and "weak scaling" in p.reason
    single.memory = None
    weak = model.Projector(net())
    weak.singles["w"] = single
    p = mesh.project_dp_tp(weak, tp, 16, single, 4)
    assert p.status == "refused" and "gradient bytes" in p.reason


def test_the_layouts_are_projected_with_tp_and_ranked_beside_it_under_device_memory():
    # Gradients small enough to hide: every layout beats 1-D tp's throughput at world 16 (tp at 16
    # trains one batch of 32 where dp=8,tp=2 trains eight), and each fits 1 MiB.
    doc_cases = [case("single", 1, 4.0, 6.0), case("tp", 2, 2.4, 3.6, comm_ms=5.0, params=600.0,
                                                   collectives_a_step=4, comm_bytes=4 * MIB)]
    projector = model.Projector(net())
    projector.singles["w"] = doc_cases[0]
    tp = doc_cases[1]
    rows = [projector.project(tp, "tp", 16)] + [projector.project_layout(tp, 16, t) for t in mesh.tp_sizes(16, 8)]
    rows += [projector.project_layout(tp, 16, t, "fsdp") for t in mesh.tp_sizes(16, 8)]
    assert [r.strategy for r in rows] == ["tp", "dp=8,tp=2", "dp=4,tp=4", "dp=2,tp=8", "fsdp=8,tp=2", "fsdp=4,tp=4",
                                          "fsdp=2,tp=8"]
    assert all(r.status == "projected" and r.samples_per_second_band for r in rows)
    assert all(r.samples_per_second > rows[0].samples_per_second for r in rows[1:])
    # fsdp=8,tp=2 first: its optimizer steps an eighth of what dp=8,tp=2's does, the rest alike.
    (line,) = answers.fit_answers(rows, MIB)
    assert line.startswith("w at world 16: fastest that fits in 1 MiB a device: fsdp=8,tp=2"), line
    assert "dp=8,tp=2" in line and "dp=4,tp=4" in line and "dp=2,tp=8" in line and "tp (" in line
    # At 1000 bytes a device the dp layouts (a second copy of the gradients) no longer fit; fsdp's do.
    (line,) = answers.fit_answers(rows, 1000)
    fit, over = line.split("; do not fit: ")
    assert "fsdp=8,tp=2" in fit and "fsdp=4,tp=4" in fit
    assert all(name in over for name in ("dp=8,tp=2", "dp=4,tp=4", "dp=2,tp=8")), line


@pytest.mark.parametrize("kind", mesh.KINDS)
def test_where_the_cores_carry_the_transport_nothing_hides_under_compute(kind):
    # Gloo over a host's loopback: the bytes are copied by the cores that would compute, so the
    # data-parallel collectives are all exposed (and slowed as tp's are), however long compute is.
    single = case("single", 1, 4.0, 600.0, optimizer_ms=2.0)
    tp = case("tp", 2, 2.4, 360.0, comm_ms=5.0, params=600.0, collectives_a_step=4, comm_bytes=4 * MIB)
    on_cores = model.Projector(replace(net(nics=8), transport_on_compute_cores=True))
    on_cores.singles["w"] = single
    p = mesh.project_dp_tp(on_cores, tp, 16, single, 4, kind)
    assert p.status == "projected" and p.exposed_comm_ms == pytest.approx(p.comm_ms)
    assert any("cannot hide it" in a for a in p.assumptions), p.assumptions
    apart = model.Projector(net(nics=8))
    apart.singles["w"] = single
    q = mesh.project_dp_tp(apart, tp, 16, single, 4, kind)
    assert q.exposed_comm_ms < q.comm_ms  # 600 ms of backward hides a 1 KiB collective elsewhere
