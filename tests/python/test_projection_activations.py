"""ddpbench-project's activations (projection/activations.py): the line fitted to a file's measured
activations, the memory it changes under strong scaling, and --grad-accum as a way to fit under
--device-memory, on real runs and on cases whose figures are set by hand."""
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from projection import activations, answers, model  # noqa: E402
from projection.cases import MeasuredCase  # noqa: E402
from reports import results  # noqa: E402

EXE = os.path.join(BUILD, "ddpbench")
PROJECT = os.path.join(ROOT, "scripts", "ddpbench-project")
MIB = 2 ** 20


def case(strategy, world, batch, activations_bytes, levers=None, workload="w"):
    return MeasuredCase(name=f"{workload}/{strategy}/world:{world}", workload=workload, strategy=strategy,
                        world=world, global_batch=batch, phases={}, gradient_bytes=None, buckets=None, step_s=1.0,
                        activation_bytes=activations_bytes, levers=levers or {})


def test_two_micro_batches_give_the_fixed_part_and_the_part_per_sample():
    # 100 MiB that do not grow with the batch (a fused loss's chunk) + 10 MiB a sample.
    cases = [case("single", 1, 8, (100 + 80) * MIB), case("ddp", 2, 8, (100 + 40) * MIB),
             case("fsdp", 4, 8, (100 + 20) * MIB), case("dp", 2, 8, 999 * MIB), case("pp", 2, 8, 1 * MIB)]
    line = activations.fit(cases, "w")
    assert line.fixed == pytest.approx(100 * MIB) and line.per_sample == pytest.approx(10 * MIB)
    assert [name for name, _, _ in line.points] == ["w/single/world:1", "w/ddp/world:2", "w/fsdp/world:4"]
    assert "100 MiB + 10 MiB a sample a device" in line.describe("w")


def test_one_micro_batch_is_taken_as_all_of_it_growing_with_the_batch_and_said():
    line = activations.fit([case("ddp", 2, 16, 80 * MIB), case("fsdp", 2, 16, 80 * MIB)], "w")
    assert line.fixed == 0 and line.at(4) == pytest.approx(40 * MIB)
    assert "proportional to the micro-batch from one measured batch" in line.describe("w")


def test_a_file_run_under_grad_accum_counts_the_micro_batch_and_checkpointing_is_said():
    levers = {"grad_accum": 4, "activation_checkpointing": "full"}
    [c] = [case("ddp", 2, 64, 32 * MIB, levers)]
    assert activations.micro_batch(c) == 8
    line = activations.fit([c], "w")
    assert line.per_sample == pytest.approx(4 * MIB)
    assert "under --activation-checkpointing full" in line.describe("w")


def test_a_line_that_falls_with_the_batch_is_refitted_through_zero():
    line = activations.fit([case("single", 1, 8, 10 * MIB), case("ddp", 2, 8, 12 * MIB)], "w")
    assert line.fixed == 0 and line.per_sample > 0
    assert activations.fit([case("ddp", 2, 8, None)], "w") is None


def test_grad_accum_options_halve_the_micro_batch_while_it_splits_into_whole_samples():
    line = activations.ActivationLine(100.0, 10.0, [], "none")
    p = model.Projection("w", "ddp", 8, 1, "projected", samples_per_second=50.0, memory_per_device_bytes=1000.0)
    options = activations.grad_accum_options(p, line, 12)
    assert [o.lever for o in options] == ["--grad-accum 2", "--grad-accum 4"]  # 12/8 is not whole
    assert [o.memory_per_device_bytes for o in options] == [1000 - 60, 1000 - 90]
    assert [o.activation_bytes for o in options] == [160, 130]
    assert options[0].throughput == 50.0 and "if micro-batches of 6 compute as fast a sample" in options[0].cost
    fsdp = model.Projection("w", "fsdp", 8, 1, "projected", samples_per_second=50.0, memory_per_device_bytes=500.0)
    [two, four] = activations.grad_accum_options(fsdp, line, 12)
    assert two.throughput is None and "not projected" in two.cost
    # A file run under --grad-accum 2 already: its micro-batch of 12 halves at --grad-accum 4.
    assert [o.lever for o in activations.grad_accum_options(p, line, 12, current=2)] == ["--grad-accum 4",
                                                                                         "--grad-accum 8"]


def test_the_fit_answer_offers_the_fewest_micro_batches_that_fit():
    p = model.Projection("w", "ddp", 8, 1, "projected", samples_per_second=50.0, memory_per_device_bytes=100 * MIB,
                         activation_bytes=40 * MIB,
                         levers=[{"lever": "--grad-accum 2", "memory_per_device_bytes": 80 * MIB,
                                  "activation_bytes": 20 * MIB, "throughput": 50.0, "cost": "C2"},
                                 {"lever": "--grad-accum 4", "memory_per_device_bytes": 70 * MIB,
                                  "activation_bytes": 10 * MIB, "throughput": 50.0, "cost": "C4"}])
    [line, note] = answers.fit_answers([p], 75 * MIB)
    assert line == ("w at world 8: nothing fits in 75 MiB a device; the least: ddp (100 MiB); with a memory lever: "
                    "ddp --grad-accum 4 (70 MiB, activations 40 MiB -> 10 MiB; C4)")
    assert note == activations.LEVERS_NOTE
    [none] = answers.fit_answers([p], 60 * MIB)  # no lever reaches it: none offered
    assert none == "w at world 8: nothing fits in 60 MiB a device; the least: ddp (100 MiB)"


@pytest.fixture(scope="module")
def mlp_run(tmp_path_factory):
    """single at batch 32 and ddp and fsdp at 16 a rank: mlp's activations are three B x 1024 fp32
    ReLU outputs and a B x 10 log-softmax (WORKLOADS.md), so the line is known."""
    path = tmp_path_factory.mktemp("activations") / "run.json"
    subprocess.run([EXE, "--strategy", "single,ddp,fsdp", "--world-size", "2", "--workload", "mlp", "--device", "cpu",
                    "--threads", "1", "--batch", "32", "--steps", "2", "--warmup", "1", "--repetitions", "1",
                    "--parity-steps", "0", "--json", str(path)], check=True, stdout=subprocess.DEVNULL)
    return path


def test_a_real_runs_line_is_mlps_saved_tensors_and_strong_scaling_shrinks_the_memory_by_it(mlp_run, tmp_path):
    cases = model.measured_cases(results.load(str(mlp_run)))
    line = activations.fit(cases, "mlp")
    per_sample = 3 * 1024 * 4 + 10 * 4
    assert line.per_sample == pytest.approx(per_sample, rel=0.01)
    assert abs(line.fixed) < 64 * 1024  # the loss's scalars, nothing a sample
    out = {}
    for scaling in ("weak", "strong"):
        r = subprocess.run([sys.executable, PROJECT, str(mlp_run), "--world", "8", "--scaling", scaling, "--json",
                            str(tmp_path / f"{scaling}.json")], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
        out[scaling] = {p["strategy"]: p for p in json.load(open(tmp_path / f"{scaling}.json"))["projections"]}
    ddp = next(c for c in cases if c.strategy == "ddp")
    # weak: each rank keeps 16 samples, its activations as measured; strong: 32 / 8 = 4 a rank.
    assert out["weak"]["ddp"]["activation_bytes"] == ddp.activation_bytes
    assert out["strong"]["ddp"]["activation_bytes"] == pytest.approx(ddp.activation_bytes - 12 * line.per_sample)
    for s in ("ddp", "fsdp"):
        fell = out["weak"][s]["memory_per_device_bytes"] - out["strong"][s]["memory_per_device_bytes"]
        assert fell == pytest.approx(12 * line.per_sample), s
    assert out["weak"]["dp"]["activation_bytes"] is None  # not a model per device: not projected
    assert "a line through mlp/single/world:1 at 32, mlp/ddp/world:2 at 16" in r.stdout


def test_device_memory_offers_grad_accum_where_the_activations_decide(mlp_run, tmp_path):
    cases = model.measured_cases(results.load(str(mlp_run)))
    line = activations.fit(cases, "mlp")
    r = subprocess.run([sys.executable, PROJECT, str(mlp_run), "--world", "8", "--json", str(tmp_path / "p.json")],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    ddp = next(p for p in json.load(open(tmp_path / "p.json"))["projections"] if p["strategy"] == "ddp")
    # A budget between ddp at 4 micro-batches of 4 and at 2 of 8: --grad-accum 4 is the answer.
    at = {k: ddp["memory_per_device_bytes"] - (line.at(16) - line.at(16 / k)) for k in (2, 4)}
    assert [o["lever"] for o in ddp["levers"]][:2] == ["--grad-accum 2", "--grad-accum 4"]
    assert [o["memory_per_device_bytes"] for o in ddp["levers"][:2]] == [pytest.approx(at[2]), pytest.approx(at[4])]
    budget = f"{(at[2] + at[4]) / 2 / 1024:.1f}KiB"
    r = subprocess.run([sys.executable, PROJECT, str(mlp_run), "--world", "8", "--strategy", "ddp",
                        "--device-memory", budget], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "with a memory lever: ddp --grad-accum 4 (" in r.stdout
    assert "memory levers: --grad-accum K runs K micro-batches" in r.stdout


def test_the_fit_answer_takes_the_fastest_lever_that_fits_then_the_fewest_micro_batches():
    def lever(name, memory, throughput):
        return {"lever": name, "memory_per_device_bytes": memory * MIB, "activation_bytes": MIB,
                "throughput": throughput, "cost": name}
    p = model.Projection("w", "fsdp", 8, 1, "projected", samples_per_second=50.0, memory_per_device_bytes=100 * MIB,
                         activation_bytes=40 * MIB,
                         levers=[lever("--activation-checkpointing full", 70, 40.0), lever("--grad-accum 2", 80, None),
                                 lever("--grad-accum 4", 65, None)])
    assert "fsdp --activation-checkpointing full (70 MiB" in answers.with_lever(p, 75 * MIB)
    assert "fsdp --grad-accum 4 (65 MiB" in answers.with_lever(p, 66 * MIB)  # checkpointing does not fit
    p.levers[0]["throughput"] = None
    assert "fsdp --activation-checkpointing full (70 MiB" in answers.with_lever(p, 90 * MIB)  # the first of equals
    assert answers.with_lever(p, 60 * MIB) is None


def runs_of(tmp_path_factory, name, workload, extra=()):
    path = tmp_path_factory.mktemp("activations") / f"{name}.json"
    subprocess.run([EXE, "--strategy", "single,ddp", "--world-size", "2", "--workload", workload, "--device", "cpu",
                    "--threads", "1", "--batch", "8", "--steps", "2", "--warmup", "1", "--repetitions", "1",
                    "--parity-steps", "0", "--json", str(path), *extra], check=True, stdout=subprocess.DEVNULL)
    return path


@pytest.fixture(scope="module")
def transformer_runs(tmp_path_factory):
    """transformer's single and ddp, plain and under --activation-checkpointing full (its two
    blocks keep their inputs only)."""
    return (runs_of(tmp_path_factory, "plain", "transformer"),
            runs_of(tmp_path_factory, "checkpointed", "transformer", ("--activation-checkpointing", "full")))


def test_a_checkpointed_run_makes_checkpointing_a_lever_with_its_activations_and_recompute(transformer_runs, tmp_path):
    plain_run, checkpointed_run = transformer_runs
    plain = activations.fit(model.measured_cases(results.load(str(plain_run))), "transformer")
    cases = model.measured_cases(results.load(str(checkpointed_run)))
    checkpointed = activations.fit_checkpointed(cases, "transformer")
    assert checkpointed.policy == "full" and checkpointed.line.at(4) < plain.at(4) / 2
    r = subprocess.run([sys.executable, PROJECT, str(plain_run), "--world", "8", "--strategy", "ddp", "--checkpointed",
                        str(checkpointed_run), "--json", str(tmp_path / "p.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    [ddp] = [p for p in json.load(open(tmp_path / "p.json"))["projections"] if p["strategy"] == "ddp"]
    [lever] = [o for o in ddp["levers"] if o["lever"] == "--activation-checkpointing full"]
    assert lever["activation_bytes"] == pytest.approx(checkpointed.line.at(4))
    assert lever["memory_per_device_bytes"] == pytest.approx(
        ddp["memory_per_device_bytes"] - (plain.at(4) - checkpointed.line.at(4)))
    # The recompute ddp's checkpointed case measured, a sample a rank, on each of the 4 samples a rank.
    ddp_case = next(c for c in cases if c.strategy == "ddp")
    step_s = ddp["step_ms"] / 1e3
    assert lever["throughput"] == pytest.approx(ddp["samples_per_second"] * step_s / (step_s + ddp_case.recompute_s))
    assert f"as {ddp_case.name} measured it" in lever["cost"]


def test_checkpointing_that_keeps_no_less_is_not_offered(mlp_run, tmp_path):
    # mlp's units are one layer each: a checkpointed unit keeps its input, which its ReLU saved anyway,
    # so its activations do not fall (they rise by the first unit's input).
    checkpointed_run = tmp_path / "checkpointed.json"
    subprocess.run([EXE, "--strategy", "single,ddp", "--world-size", "2", "--workload", "mlp", "--device", "cpu",
                    "--threads", "1", "--batch", "32", "--steps", "2", "--warmup", "1", "--repetitions", "1",
                    "--parity-steps", "0", "--activation-checkpointing", "full", "--json", str(checkpointed_run)],
                   check=True, stdout=subprocess.DEVNULL)
    plain = activations.fit(model.measured_cases(results.load(str(mlp_run))), "mlp")
    checkpointed = activations.fit_checkpointed(model.measured_cases(results.load(str(checkpointed_run))), "mlp")
    assert checkpointed.line.at(16) >= plain.at(16)
    r = subprocess.run([sys.executable, PROJECT, str(mlp_run), "--world", "8", "--checkpointed", str(checkpointed_run),
                        "--json", str(tmp_path / "p.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    levers = [o["lever"] for p in json.load(open(tmp_path / "p.json"))["projections"] for o in p["levers"]]
    assert "--grad-accum 2" in levers and not any(name.startswith("--activation-checkpointing") for name in levers)


def test_checkpointed_refuses_a_run_without_checkpointing_in_one_line(mlp_run, tmp_path):
    for path, said in ((mlp_run, "ran without --activation-checkpointing (its levers say none)"),
                       (tmp_path / "absent.json", "absent.json")):
        r = subprocess.run([sys.executable, PROJECT, str(mlp_run), "--checkpointed", str(path)], capture_output=True,
                           text=True)
        assert r.returncode == 2 and r.stdout == ""
        assert len(r.stderr.splitlines()) == 1 and said in r.stderr, r.stderr
