"""ddpbench-project's tp (projection/tensor_parallel.py): the share of compute the split divides, read
off a tp case against single's; the all-reduces as measured, each over the group at the projected
size; memory at the share of the parameters a rank holds; a case on a mesh refused; and a real run
projected end to end."""
import json
import os
import subprocess

import pytest

from build_paths import BUILD, ROOT, small_run  # noqa: E402,F401
from projection import collectives, model, tensor_parallel  # noqa: E402
from tp_cases import MIB, MS, case, net  # noqa: E402

def test_the_split_share_is_read_off_tps_compute_against_singles():
    single = case("single", 1, 4.0, 6.0)
    tp = case("tp", 2, 2.4, 3.6, comm_ms=5.0, params=600.0, collectives_a_step=4, comm_bytes=4 * MIB)
    # 6 ms where single took 10: C (1 - s + s / 2) = 0.6 C, so s = 0.8; the parameters 600 of 1000: 0.8.
    s, p = tensor_parallel.split_shares(model.Projector(net()), tp, single)
    assert s == pytest.approx(0.8) and p == pytest.approx(0.8)
    # A tp case slower than single splits nothing (held to 0), one twice as fast splits everything.
    assert tensor_parallel.split_shares(model.Projector(net()), case("tp", 2, 8, 8, params=1000.0), single)[0] == 0.0
    assert tensor_parallel.split_shares(model.Projector(net()), case("tp", 2, 2, 3, params=500.0), single) == (1.0, 1.0)


@pytest.mark.parametrize("world", [2, 4, 8, 16])
def test_the_step_is_singles_compute_at_its_share_plus_the_all_reduces_over_the_group(world):
    single = case("single", 1, 4.0, 6.0, optimizer_ms=2.0)
    tp = case("tp", 2, 2.4, 3.6, comm_ms=5.0, params=600.0, collectives_a_step=4, comm_bytes=4 * MIB)
    projector = model.Projector(net())
    projector.singles["w"] = single
    p = projector.project(tp, "tp", world)
    assert p.status == "projected" and p.from_case == "w/tp/world:2"
    share = 0.2 + 0.8 / world
    one = collectives.allreduce(net(), MIB, world)
    expected = 0.5 * MS + 10 * MS * share + 4 * one.seconds + 2 * MS * share + 0.1 * MS
    assert p.step_ms == pytest.approx(expected * 1e3)
    assert p.comm_ms == p.exposed_comm_ms == pytest.approx(4 * one.seconds * 1e3)
    assert p.samples_per_second == pytest.approx(32 / expected)  # the batch as measured: tp splits the model
    assert p.memory_per_device_bytes == pytest.approx(4000 * share + 50)
    assert p.algorithms == [one.algorithm]
    if world == 16:  # two nodes: the group's all-reduce crosses the slower link
        assert p.comm_ms > projector.project(tp, "tp", 8).comm_ms


@pytest.mark.parametrize("world", [2, 8, 16])
def test_under_sequence_parallelism_the_reduce_scatters_and_all_gathers_are_costed_as_such(world):
    # 10 collectives a step: 4 reduce-scatters and 4 all-gathers of 8 MiB, 2 all-reduces of 1 MiB.
    single = case("single", 1, 4.0, 6.0, optimizer_ms=2.0)
    tp = case("tp", 2, 2.4, 3.6, comm_ms=5.0, params=600.0, collectives_a_step=10, comm_bytes=2 * MIB,
              reduce_scatters=(4, 32 * MIB), all_gathers=(4, 32 * MIB))
    projector = model.Projector(net())
    projector.singles["w"] = single
    p = projector.project(tp, "tp", world)
    expected = (2 * collectives.allreduce(net(), MIB, world).seconds
                + 4 * collectives.reduce_scatter(net(), 8 * MIB, world).seconds
                + 4 * collectives.all_gather(net(), 8 * MIB, world).seconds)
    assert p.comm_ms == p.exposed_comm_ms == pytest.approx(expected * 1e3)
    assert any("4 reduce-scatter(s) of 8.00 MiB" in a and "2 all-reduce(s)" in a for a in p.assumptions)


def test_without_single_in_the_file_tp_is_refused_saying_what_to_run():
    tp = case("tp", 2, 2.4, 3.6, comm_ms=5.0, collectives_a_step=4, comm_bytes=4 * MIB)
    p = model.Projector(net()).project(tp, "tp", 4)
    assert p.status == "refused" and "--strategy single,tp" in p.reason
    with pytest.raises(model.ProjectionError, match="world 2 or more"):
        tensor_parallel.split_shares(model.Projector(net()), case("tp", 1, 1, 1), case("single", 1, 1, 1))


def test_a_tp_case_on_a_mesh_is_refused_not_read_as_one_dimensional_tp():
    # Its world is the mesh's (4) and its comm object the tp pair's: read as tp over 4, both would lie.
    tp = case("tp", 4, 2.4, 3.6, comm_ms=5.0, collectives_a_step=4, comm_bytes=4 * MIB)
    tp.mesh = "dp=2,tp=2"
    projector = model.Projector(net())
    projector.singles["w"] = case("single", 1, 4.0, 6.0)
    p = projector.project(tp, "tp", 8)
    assert p.status == "refused" and "mesh dp=2,tp=2 (--mesh)" in p.reason and p.memory_per_device_bytes is None
    tp.mesh = None
    assert projector.project(tp, "tp", 8).status == "projected"


def test_a_real_run_of_single_and_tp_is_projected_and_tp_is_a_default_strategy(tmp_path):
    results = tmp_path / "r.json"
    small_run(results, "single,tp")
    doc = json.load(open(results))
    assert "tp" in model.default_strategies(doc)
    (tp,) = [c for c in model.measured_cases(doc) if c.strategy == "tp"]
    assert tp.comm_collectives == 3  # mlp: two column-row pairs; the first layer's input needs no gradient
    assert tp.comm_bytes_per_step > 0
    rows = model.project_file(doc, net(), [2, 4, 8], strategies=["tp"])
    projected = [p for p in rows if p.strategy == "tp"]
    assert [p.status for p in projected] == ["projected"] * 3
    memory = [p.memory_per_device_bytes for p in projected]
    assert memory[0] > memory[1] > memory[2] > 0
    # With tp, its 2-D layouts of each world (projection/mesh.py; 8 devices a node).
    assert [(p.world, p.strategy) for p in rows if p.strategy != "tp"] == [
        (4, "dp=2,tp=2"), (4, "fsdp=2,tp=2"), (8, "dp=4,tp=2"), (8, "fsdp=4,tp=2"), (8, "dp=2,tp=4"), (8, "fsdp=2,tp=4")]
    out = subprocess.run([os.path.join(ROOT, "scripts", "ddpbench-project"), str(results), "--world", "2,4",
                          "--strategy", "tp", "--device-memory", "1GiB"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "mlp/tp" in out.stdout and "mlp/dp=2,tp=2" in out.stdout
    assert "mlp at world 2: fastest that fits in 1 GiB a device: tp" in out.stdout
    (world4,) = [line for line in out.stdout.splitlines() if "mlp at world 4:" in line]
    assert "dp=2,tp=2" in world4 and "tp (" in world4, world4


def test_a_real_sequence_parallel_run_is_read_with_its_collectives_apart_and_projected(tmp_path):
    results = tmp_path / "r.json"
    small_run(results, "single,tp", workload="transformer", extra=("--sequence-parallel",))
    doc = json.load(open(results))
    (tp,) = [c for c in model.measured_cases(doc) if c.strategy == "tp"]
    # transformer's 2 layers: 4 a layer and the output layer's 1 reduce-scatter, and 2 all-gathers more
    # (the output layer's input, the shares' gradient where the layers begin); 4 all-reduces.
    assert tp.reduce_scatters[0] == 9 and tp.all_gathers[0] == 10 and tp.comm_collectives == 23
    assert tp.reduce_scatters[1] == 9 * 16 * 64 * 128 * 4 and tp.all_gathers[1] == 10 * 16 * 64 * 128 * 4
    (p,) = [p for p in model.project_file(doc, net(), [4], strategies=["tp"]) if p.strategy == "tp"]
    assert p.status == "projected"
    assert any("9 reduce-scatter(s)" in a and "10 all-gather(s)" in a and "4 all-reduce(s)" in a
               for a in p.assumptions), p.assumptions
