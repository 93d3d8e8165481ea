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
from projection import model, pipeline, pipeline_schedule  # noqa: E402
from pp_cases import GBPS, MS, net, pp_case  # noqa: E402

EXE = os.path.join(BUILD, "ddpbench")


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
    assert pipeline.default_microbatches(64, 4, 2, interleaved=True) == 16   # up to 2 p V
    assert pipeline.default_microbatches(36, 4, 2, interleaved=True) == 12   # a multiple of p
    assert pipeline.default_microbatches(7, 2, 2, interleaved=True) is None


@pytest.mark.parametrize("stages,microbatches", [(2, 4), (4, 8)])
def test_equal_stages_give_the_bubbles_formula(stages, microbatches):
    """Eight equal units of 1 ms a micro-batch of 16 rows, measured at 2 stages: at p stages (m = 2p,
    rows 64/m) each stage takes 8/p ms x rows/16, and GPipe's step is (m + p - 1) stages plus the
    2 (p - 1) hops of the fill and drain."""
    c = pp_case([1.0] * 8, [(0, 4), (4, 8)], microbatches=4, batch=64, sent=4 * 16 * 1024, schedule="gpipe")
    n = net(intra_us=0.0)
    p = model.Projector(n, "weak").project(c, "pp", stages)
    rows = 64 / microbatches
    stage = 8 / stages * rows / 16 * MS
    hop = 16 * 1024 * rows / 16 / (100 * GBPS)
    assert p.step_ms * MS == pytest.approx((microbatches + stages - 1) * stage + 2 * (stages - 1) * hop, rel=1e-9)
    assert p.comm_ms * MS == pytest.approx(2 * (stages - 1) * hop, rel=1e-9)
    assert p.samples_per_second == pytest.approx(64 / (p.step_ms * MS))  # the batch as measured
    # 1F1B: the same compute, and its steady state waits on the next rank's gradient, a hop away,
    # so the hops cost it more than the fill and drain.
    c.pipeline["schedule"] = "1f1b"
    q = model.Projector(n, "weak").project(c, "pp", stages)
    assert q.comm_ms * MS > 2 * (stages - 1) * hop * 1.5
    assert (q.step_ms - q.comm_ms) * MS == pytest.approx((microbatches + stages - 1) * stage, rel=1e-9)


@pytest.mark.parametrize("schedule,ranks,microbatches,chunks", [
    ("gpipe", 2, 4, 1), ("gpipe", 4, 8, 1), ("1f1b", 3, 6, 1), ("1f1b", 4, 8, 1), ("naive", 4, 1, 1),
    ("interleaved-1f1b", 2, 4, 2), ("interleaved-1f1b", 4, 8, 2), ("interleaved-1f1b", 3, 3, 3)])
def test_the_schedules_played_with_equal_stages_leave_the_formulas_bubble(schedule, ranks, microbatches, chunks):
    """pipeline/schedule.cpp's test, on the port: (p - 1) / (V m + p - 1), every rank busy 3 m."""
    t = pipeline_schedule.simulate(schedule, ranks, microbatches, [1.0 / chunks] * (ranks * chunks),
                                   [2.0 / chunks] * (ranks * chunks), 0.0, chunks)
    assert t.bubble == pytest.approx((ranks - 1) / (chunks * microbatches + ranks - 1), abs=1e-12)
    assert t.busy_s == pytest.approx([3.0 * microbatches] * ranks)


def test_the_schedules_hold_what_schedule_cpp_says():
    for p in (2, 3, 4):
        gpipe = pipeline_schedule.simulate("gpipe", p, 8, [1.0] * p, [2.0] * p)
        ofob = pipeline_schedule.simulate("1f1b", p, 8, [1.0] * p, [2.0] * p)
        assert gpipe.peak_in_flight == [8] * p and ofob.peak_in_flight == [p - r for r in range(p)]
    # Megatron's warm-up: 2 (p - r - 1) + (V - 1) p chunk forwards, and one.
    interleaved = pipeline_schedule.simulate("interleaved-1f1b", 4, 8, [0.5] * 8, [1.0] * 8, 0.0, 2)
    assert interleaved.peak_in_flight[0] == 2 * 3 + 4 + 1 and interleaved.peak_in_flight[3] == 4 + 1
    assert pipeline_schedule.simulate("naive", 4, 1, [1.0] * 4, [2.0] * 4).step_s == 12.0


def _forward_backward_order(trace_dir, case):
    """Each rank's forward and backward spans, in order, in the last traced step of a real run."""
    from reports import pipeline_timeline
    timeline = pipeline_timeline.one_step(pipeline_timeline.load_traces(str(trace_dir))[case])
    return {rank: "".join(name[0].upper() for name, _, _ in spans if name in ("forward", "backward"))
            for rank, spans in timeline.items()}


@pytest.mark.parametrize("schedule,extra", [("1f1b", []), ("interleaved-1f1b", ["--stages-per-rank", "2"])])
def test_the_ports_orders_are_what_ddpbench_ran(tmp_path, schedule, extra):
    """The Python schedules against the C++ ones as a real run traced them: each rank's forwards
    and backwards in the same order (the warm-up's length tells the schedules apart)."""
    trace = tmp_path / "trace"
    subprocess.run([EXE, "--strategy", "pp", "--world-size", "2", "--workload", "mlp", "--device", "cpu", "--threads",
                    "1", "--batch", "32", "--microbatches", "4", "--pp-schedule", schedule, *extra, "--steps", "2",
                    "--warmup", "0", "--repetitions", "1", "--target-precision", "0", "--parity-steps", "0",
                    "--trace", str(trace), "--json", str(tmp_path / "run.json")], check=True, stdout=subprocess.DEVNULL)
    chunks = 2 if extra else 1
    ran = _forward_backward_order(trace, "mlp/pp/world:2")
    port = {r: "".join("F" if a.forward else "B" for a in pipeline_schedule.rank_actions(schedule, 2, 4, chunks, r))
            for r in range(2)}
    assert ran == port
    assert port[0] != port[1]   # the warm-ups differ by rank: the comparison can fail


def test_interleaved_is_projected_with_its_chunks():
    """A case of 2 ranks x 2 chunks over 8 equal units (1 ms a micro-batch each): at 4 ranks the
    chain is cut into 8 stages of one unit, m = 16 (the most up to 2 p V, a multiple of p), and with
    free hops the step is (m + (p - 1) / V) a rank's work, the interleaved formula."""
    c = pp_case([1.0] * 8, [(0, 2), (2, 4), (4, 6), (6, 8)], microbatches=4, batch=64, schedule="interleaved-1f1b")
    c.pipeline["chunks_per_rank"] = 2
    c.pipeline["compute_ms_by_rank"] = [4 * 4.0, 4 * 4.0]   # each rank: 4 units a micro-batch
    proj = model.Projector(net(intra_us=0.0), "weak")
    p = proj.project(c, "pp", 4)
    assert p.status == "projected", p.reason
    per_rank = 2 * 1.0 * (64 / 16) / 16 * MS       # 2 units of 1 ms at 4 rows a micro-batch, not 16
    assert p.step_ms * MS == pytest.approx((16 + 3 / 2) * per_rank, rel=1e-9)
    assert "interleaved-1f1b, 4 rank(s) x 2 chunk(s)" in " ".join(p.assumptions)
    # 5 ranks x 2 chunks need 10 units; at 3 ranks the case's own --microbatches 4 is no multiple of 3
    assert "need a unit each" in proj.project(c, "pp", 5).reason
    c.settings["microbatches"] = 4
    assert "multiple of it" in proj.project(c, "pp", 3).reason


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
    c = pp_case([1.0] * 8, [(0, 4), (4, 8)], microbatches=4, batch=64, sent=4 * 1e6, schedule="gpipe")
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


def test_a_case_run_on_a_mesh_is_refused_naming_it(tmp_path):
    """A pp case of --mesh dp=2,pp=2 ran four ranks as two pipelines of two on half the batch each:
    read as one pipeline of four it would lie, so it is refused, saying so."""
    path = tmp_path / "run.json"
    subprocess.run([EXE, "--strategy", "pp", "--mesh", "dp=2,pp=2", "--workload", "mlp", "--device", "cpu",
                    "--threads", "1", "--batch", "12", "--steps", "2", "--warmup", "1", "--repetitions", "1",
                    "--target-precision", "0", "--parity-steps", "0", "--json", str(path)], check=True,
                   stdout=subprocess.DEVNULL)
    (c,) = [c for c in model.measured_cases(json.loads(path.read_text())) if c.strategy == "pp"]
    assert c.mesh == "dp=2,pp=2"
    p = model.Projector(net(), "weak").project(c, "pp", 2)
    assert p.status == "refused" and "ran on the mesh dp=2,pp=2 (--mesh), which is not projected yet" in p.reason


def test_refusals_say_why():
    proj = model.Projector(net(), "weak")
    c = pp_case([1.0] * 4, [(0, 2), (2, 4)], microbatches=4)
    assert "a unit each" in proj.project(c, "pp", 5).reason
    c.pipeline["schedule"] = "zb-h1"
    assert "none of naive, gpipe, 1f1b, interleaved-1f1b" in proj.project(c, "pp", 2).reason
    split = pp_case([1.0] * 4, [(0, 1), (1, 4)], microbatches=4, balance="split")
    assert "by hand" in proj.project(split, "pp", 2).reason
    single = model.MeasuredCase(name="w/single/world:1", workload="w", strategy="single", world=1, global_batch=8,
                                phases={"forward": 1.0}, gradient_bytes=None, buckets=None, step_s=1.0)
    assert proj.project(single, "pp", 2).status == "refused"
