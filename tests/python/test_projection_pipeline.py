"""ddpbench-project's pp (projection/pipeline.py): the chain cut again as ddpbench cuts it (checked
against a real run's own cut), the schedule's step against the bubble's formula on equal stages,
the hops on the link the pipeline crosses, memory from the largest stage, and the refusals."""
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from projection import model, network, pipeline  # noqa: E402

EXE = os.path.join(BUILD, "ddpbench")
GBPS, US, MS = 1e9, 1e-6, 1e-3


def net(devices_per_node=8, intra_gbps=100.0, intra_us=2.0, inter_gbps=10.0, inter_us=10.0):
    return network.Network(name="test", devices_per_node=devices_per_node,
                           intra=network.Link(intra_gbps * GBPS, intra_us * US),
                           inter=network.Link(inter_gbps * GBPS, inter_us * US))


def pp_case(unit_ms, stage_units, microbatches, batch=64, schedule="1f1b", sent=0.0, optimizer_ms=0.0,
            balance="time", unit_parameters=None, memory=None, busy_ms=None):
    """A measured pp case whose stages computed exactly their profile (calibration 1)."""
    stages = len(stage_units)
    unit_parameters = unit_parameters or [1000] * len(unit_ms)
    stage_ms = [sum(unit_ms[b:e]) for b, e in stage_units]
    stage_parameters = [sum(unit_parameters[b:e]) for b, e in stage_units]
    busy = busy_ms or [microbatches * s + optimizer_ms * stage_parameters[r] / stage_parameters[0]
                       for r, s in enumerate(stage_ms)]
    line = {"schedule": schedule, "stages": stages, "microbatches": microbatches, "balance": balance,
            "stage_units": [list(s) for s in stage_units], "stage_parameters": stage_parameters,
            "unit_parameters": unit_parameters, "unit_profile_ms": unit_ms if balance == "time" else None,
            "compute_ms_by_rank": busy}
    phases = {"forward": microbatches * stage_ms[0] / 3 * MS, "backward": microbatches * stage_ms[0] * 2 / 3 * MS,
              "optimizer": optimizer_ms * MS, "data": 0.0, "residual": 0.0}
    return model.MeasuredCase(name=f"w/pp/world:{stages}", workload="w", strategy="pp", world=stages,
                              global_batch=batch, phases=phases, gradient_bytes=None, buckets=None,
                              step_s=sum(busy) / stages * MS, memory=memory, pipeline=line,
                              point_to_point_bytes=sent)


def test_the_cut_is_ddpbenchs_own_on_a_real_run(tmp_path):
    """The Python port cuts a real run's profiled units exactly where ddpbench's C++ cut them."""
    path = tmp_path / "run.json"
    subprocess.run([EXE, "--strategy", "pp", "--world-size", "3", "--workload", "mlp", "--device", "cpu", "--threads", "1",
                    "--batch", "24", "--steps", "2", "--warmup", "1", "--repetitions", "1", "--target-precision", "0",
                    "--parity-steps", "0", "--json", str(path)], check=True, stdout=subprocess.DEVNULL)
    (c,) = [c for c in model.measured_cases(json.loads(path.read_text())) if c.strategy == "pp"]
    line = c.pipeline
    assert len(line["unit_profile_ms"]) == 4 and line["unit_parameters"][3] == 1024 * 10 + 10
    assert pipeline.balanced_split(line["unit_profile_ms"], 3) == [tuple(s) for s in line["stage_units"]]
    p = model.Projector(net(), "weak").project(c, "pp", 2)
    assert p.status == "projected" and p.step_ms > 0 and p.memory_per_device_bytes > 0


def test_balanced_split_keeps_the_cpp_ties():
    assert pipeline.balanced_split([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]             # equal: the even cut
    assert pipeline.balanced_split([1, 1, 1, 1, 1], 2) == [(0, 3), (3, 5)]          # odd: more units early
    assert pipeline.balanced_split([5, 1, 1, 1, 1, 1], 2) == [(0, 1), (1, 6)]       # the heavy unit alone
    assert pipeline.balanced_split([0.8, 1, 1, 0.01], 3) == [(0, 1), (1, 2), (2, 4)]  # mlp's, PpStages
    with pytest.raises(ValueError):
        pipeline.balanced_split([1, 1], 3)


def test_default_microbatches_are_ddpbenchs():
    assert pipeline.default_microbatches(64, 4) == 8
    assert pipeline.default_microbatches(12, 4) == 6   # the most up to 8 that divides 12
    assert pipeline.default_microbatches(7, 2) == 1


@pytest.mark.parametrize("stages,microbatches", [(2, 4), (4, 8)])
def test_equal_stages_give_the_bubbles_formula(stages, microbatches):
    """Eight equal units of 1 ms a micro-batch of 16 rows, measured at 2 stages: at p stages (m = 2p,
    rows 64/m) each stage takes 8/p ms x rows/16, and the step is (m + p - 1) stages, plus the hops."""
    c = pp_case([1.0] * 8, [(0, 4), (4, 8)], microbatches=4, batch=64, sent=4 * 16 * 1024)
    n = net(intra_us=0.0)
    p = model.Projector(n, "weak").project(c, "pp", stages)
    rows = 64 / microbatches
    stage = 8 / stages * rows / 16 * MS
    hop = 16 * 1024 * rows / 16 / (100 * GBPS)
    assert p.step_ms * MS == pytest.approx((microbatches + stages - 1) * stage + 2 * (stages - 1) * hop, rel=1e-9)
    assert p.comm_ms * MS == pytest.approx(2 * (stages - 1) * hop, rel=1e-9)
    assert p.samples_per_second == pytest.approx(64 / (p.step_ms * MS))  # the batch as measured


def test_the_slowest_stage_sets_the_pace_and_the_cut_follows_the_times():
    # Units 3, 1, 1, 1 ms: at 2 stages the cut is [0,1) [1,4), 3 ms each; even would be 4 and 2.
    c = pp_case([3.0, 1.0, 1.0, 1.0], [(0, 1), (1, 4)], microbatches=4, batch=32)
    p = model.Projector(net(intra_us=0.0), "weak").project(c, "pp", 2)
    assert p.step_ms == pytest.approx(4 * 3 + 3)
    # The same case cut evenly by count (no profile): the units are taken by their parameters.
    even = pp_case([3.0, 1.0, 1.0, 1.0], [(0, 2), (2, 4)], microbatches=4, batch=32, balance="even")
    q = model.Projector(net(intra_us=0.0), "weak").project(even, "pp", 2)
    assert q.status == "projected" and any("in proportion to its parameters" in a for a in q.assumptions)


def test_a_pipeline_across_nodes_sends_over_the_inter_node_link():
    c = pp_case([1.0] * 8, [(0, 4), (4, 8)], microbatches=4, batch=64, sent=4 * 1e6)
    inside, across = (model.Projector(net(devices_per_node=d, intra_us=0, inter_us=0), "weak").project(c, "pp", 4)
                      for d in (8, 2))
    assert inside.comm_ms == pytest.approx(6 * 0.5e6 / (100 * GBPS) / MS)
    assert across.comm_ms == pytest.approx(6 * 0.5e6 / (10 * GBPS) / MS)


def test_memory_is_the_largest_stage_and_stage_zeros_activations():
    # 2 stages of 2 units, 1000 elements a unit, 16 bytes an element held (parameters, gradients, two
    # optimizer states); under 1F1B stage 0 held min(m, p) = 2 micro-batches of its 2 units: 4 MB, 1 MB
    # a unit and micro-batch of 16 rows.
    mem = {"parameter_bytes": 8000.0, "gradient_bytes": 8000.0, "optimizer_state_bytes": 16000.0, "other_bytes": 4e6}
    c = pp_case([1.0] * 4, [(0, 2), (2, 4)], microbatches=4, batch=64, memory=mem)
    p = model.Projector(net(), "weak").project(c, "pp", 4)   # 1 unit a stage, m = 8, rows 8 (half)
    assert p.memory_per_device_bytes == pytest.approx(1000 * 16 + 1e6 * 0.5 * 1 * 4)


def test_refusals_say_why():
    proj = model.Projector(net(), "weak")
    c = pp_case([1.0] * 4, [(0, 2), (2, 4)], microbatches=4)
    assert "a unit each" in proj.project(c, "pp", 5).reason
    c.pipeline["schedule"] = "interleaved-1f1b"
    assert "not projected yet" in proj.project(c, "pp", 2).reason
    split = pp_case([1.0] * 4, [(0, 1), (1, 4)], microbatches=4, balance="split")
    assert "by hand" in proj.project(split, "pp", 2).reason
    single = model.MeasuredCase(name="w/single/world:1", workload="w", strategy="single", world=1, global_batch=8,
                                phases={"forward": 1.0}, gradient_bytes=None, buckets=None, step_s=1.0)
    assert proj.project(single, "pp", 2).status == "refused"
