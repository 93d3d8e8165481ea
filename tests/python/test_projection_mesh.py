"""ddpbench-project's 2-D layouts (projection/mesh.py): which tp sizes a world's layouts take; dp=D,tp=T
from a 1-D tp case and single's, its dp all-reduce over the dp group with the node's NICs shared by
its T groups and hidden under backward up to backward's length; fsdp=D,tp=T's gathers and
reduce-scatter hidden under compute, and its memory; refusals; and the layouts ranked beside the
1-D strategies under --device-memory. Then pp's layouts, dp=D,pp=P and fsdp=D,pp=P from a 1-D pp
case: which pipeline sizes, the pipeline at P and its data-parallel collectives all exposed, their
memory, refusals, and the command listing them beside pp from a real run."""
import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest

from build_paths import BUILD, ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from projection import answers, collectives, mesh, model, pipeline, tensor_parallel  # noqa: E402
from pp_cases import net as pp_net, pp_case  # noqa: E402
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


# ---- the layouts of pp with data parallelism: dp=D,pp=P and fsdp=D,pp=P from a 1-D pp case ----

def test_pp_sizes_are_powers_of_two_within_the_chain_with_a_data_parallel_dimension():
    assert mesh.pp_sizes(16, 4) == [2, 4]
    assert mesh.pp_sizes(16, 12) == [2, 4, 8]
    assert mesh.pp_sizes(6, 4) == [2]  # 4 does not divide 6
    assert mesh.pp_sizes(4, 4) == [2]  # pp=4 leaves no dp dimension
    assert mesh.pp_sizes(8, 1) == []  # one unit: no pipeline


def a_pp_case():
    """mlp-like: 4 units of 1 ms and 1000 parameters each, 2 stages of 2, 4 micro-batches; 4 bytes a
    parameter for each of parameters, gradients and optimizer state (rank 0 holds 2000)."""
    memory = {"parameter_bytes": 8000.0, "gradient_bytes": 8000.0, "optimizer_state_bytes": 8000.0,
              "other_bytes": 4000.0}
    return pp_case([1.0] * 4, [(0, 2), (2, 4)], microbatches=4, memory=memory)


@pytest.mark.parametrize("kind", mesh.KINDS)
def test_a_pp_layout_is_each_pipeline_at_p_plus_its_data_parallel_collectives_all_exposed(kind):
    c = a_pp_case()
    projector = model.Projector(pp_net(), "weak")
    one_d = pipeline.project_pp(projector, c, 2)
    p = mesh.project_dp_pp(projector, c, 16, 2, kind)
    assert p.status == "projected" and p.strategy == f"{kind}=8,pp=2"
    # The dp groups: 8 ranks, 4 a node (devices_per_node 8 / P 2), the node's 2 stages' groups on its NIC.
    dp_net = replace(pp_net(), devices_per_node=4, nics_per_node=1 / 2)
    stage_bytes = 2000 * 4.0
    if kind == "fsdp":
        added = (collectives.all_gather(dp_net, stage_bytes, 8).seconds
                 + collectives.reduce_scatter(dp_net, stage_bytes, 8).seconds)
    else:
        added = collectives.allreduce(dp_net, stage_bytes, 8).seconds
    contention = projector.relative_contention(c, 16) / projector.relative_contention(c, 2)
    assert p.step_ms == pytest.approx(one_d.step_ms * contention + added * 1e3)
    assert p.exposed_comm_ms == pytest.approx(one_d.exposed_comm_ms + added * 1e3)  # none of it hidden
    assert p.samples_per_second == pytest.approx(8 * c.global_batch / (p.step_ms / 1e3))
    if kind == "fsdp":
        # The stage gathered whole for the step, its optimizer state and chunks at 1/8.
        expected = one_d.memory_per_device_bytes - 8000 + 3 * 8000 / 8
    else:
        expected = one_d.memory_per_device_bytes  # the gradients are the all-reduce's buffer
    assert p.memory_per_device_bytes == pytest.approx(expected)
    assert any("all exposed" in a for a in p.assumptions), p.assumptions


def test_a_pp_layout_is_refused_where_its_pipeline_or_its_sizes_are_not_known():
    c = a_pp_case()
    assert mesh.project_dp_pp(model.Projector(pp_net(), "strong"), c, 16, 2).reason.startswith(
        "a mesh is projected under weak scaling only")
    assert "need a unit each" in mesh.project_dp_pp(model.Projector(pp_net(), "weak"), c, 16, 8).reason
    bare = pp_case([1.0] * 4, [(0, 2), (2, 4)], microbatches=4)
    assert "has no memory by kind" in mesh.project_dp_pp(model.Projector(pp_net(), "weak"), bare, 16, 2).reason


def test_the_command_projects_the_pp_layouts_beside_pp(tmp_path):
    """A real pp run at world 2 (mlp's 4 units) projected to world 8: pp itself (8 stages: refused,
    4 units), then dp=4,pp=2, fsdp=4,pp=2, dp=2,pp=4 and fsdp=2,pp=4."""
    path = tmp_path / "run.json"
    subprocess.run([os.path.join(BUILD, "ddpbench"), "--strategy", "pp", "--world-size", "2", "--workload", "mlp",
                    "--device", "cpu", "--threads", "1", "--batch", "24", "--steps", "2", "--warmup", "1",
                    "--repetitions", "1", "--target-precision", "0", "--parity-steps", "0", "--json", str(path)],
                   check=True, stdout=subprocess.DEVNULL)
    rows = model.project_file(json.loads(path.read_text()), pp_net(), [8], strategies=["pp"])
    assert [r.strategy for r in rows] == ["pp", "dp=4,pp=2", "fsdp=4,pp=2", "dp=2,pp=4", "fsdp=2,pp=4"]
    assert rows[0].status == "refused" and "need a unit each" in rows[0].reason
    assert all(r.status == "projected" and r.samples_per_second_band and r.memory_per_device_bytes for r in rows[1:]), [
        (r.strategy, r.reason) for r in rows]
    # Two pipelines of 4 hold a quarter of the model a rank, four of 2 half: fsdp's chunks aside, more.
    by_name = {r.strategy: r for r in rows}
    assert by_name["dp=2,pp=4"].memory_per_device_bytes < by_name["dp=4,pp=2"].memory_per_device_bytes
    assert by_name["fsdp=4,pp=2"].memory_per_device_bytes < by_name["dp=4,pp=2"].memory_per_device_bytes
