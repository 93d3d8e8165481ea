"""ddpbench-project --seq-len (projection/sequence.py): a sequence model's cases read at another
number of tokens a sample from the workload facts its file records, on cases set by hand and on
real gpt2 runs at two lengths, and its refusals."""
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from projection import activations, model, network, sequence  # noqa: E402
from projection.cases import Bucket, MeasuredCase, ProjectionError  # noqa: E402
from reports import results  # noqa: E402

EXE = os.path.join(BUILD, "ddpbench")
PROJECT = os.path.join(ROOT, "scripts", "ddpbench-project")
MIB = 2 ** 20
# 32 tokens; 1000 FLOPs a sample of which 100 attention's; 1 MiB fixed, 2 MiB of kept scores a sample
FACTS = {"tokens_per_sample": 32, "max_tokens_per_sample": 1024, "flops_per_sample": 1000.0,
         "attention_flops_per_sample": 100.0, "attention_score_bytes_per_sample": 2 * MIB,
         "fixed_activation_bytes": 1 * MIB}


def case(strategy="ddp", world=2, batch=8, facts=FACTS, workload="w"):
    # 4 samples a rank: 1 MiB fixed + 4 x 2 MiB of scores + 4 x 5 MiB growing linearly
    return MeasuredCase(name=f"{workload}/{strategy}/world:{world}", workload=workload, strategy=strategy, world=world,
                        global_batch=batch, phases={"data": 0.01, "forward": 0.1, "backward": 0.2, "optimizer": 0.05},
                        gradient_bytes=100.0, buckets=[Bucket(50.0, 0.1), Bucket(50.0, 0.2)], step_s=0.36,
                        memory={"parameter_bytes": 10.0, "gradient_bytes": 10.0, "optimizer_state_bytes": 20.0,
                                "other_bytes": 40.0 * MIB},
                        activation_bytes=(1 + 4 * 2 + 4 * 5) * MIB, facts=dict(facts))


def test_four_times_the_tokens_scale_compute_by_the_flops_and_activations_by_their_parts():
    c = case()
    scale = sequence.scale_for(c, 128)
    assert scale.linear == 4 and scale.compute == pytest.approx((900 * 4 + 100 * 16) / 1000)
    r = sequence.rescale(c, scale)
    assert r.phases["forward"] == pytest.approx(0.1 * scale.compute)
    assert r.phases["backward"] == pytest.approx(0.2 * scale.compute)
    assert r.phases["data"] == pytest.approx(0.04) and r.phases["optimizer"] == 0.05  # the optimizer follows the parameters
    assert [b.ready_s for b in r.buckets] == [pytest.approx(0.1 * scale.compute), pytest.approx(0.2 * scale.compute)]
    assert [b.nbytes for b in r.buckets] == [50.0, 50.0] and r.gradient_bytes == 100.0
    # the fixed MiB stays; the scores (8 MiB) grow 16 times, the rest (20 MiB) 4 times
    assert r.activation_bytes == pytest.approx((1 + 8 * 16 + 20 * 4) * MIB)
    assert r.memory["other_bytes"] == pytest.approx(40 * MIB + r.activation_bytes - c.activation_bytes)
    assert r.memory["parameter_bytes"] == 10.0 and c.phases["forward"] == 0.1  # the measured case is left as it was
    # fewer tokens shrink them by the same rules
    half = sequence.rescale(c, sequence.scale_for(c, 16))
    assert half.activation_bytes == pytest.approx((1 + 8 / 4 + 20 / 2) * MIB)


def test_a_checkpointed_unit_keeps_no_scores_so_none_grow_as_the_square():
    full = case()
    full.levers = {"activation_checkpointing": "full"}
    scale = sequence.scale_for(full, 128)
    # all 28 MiB but the fixed one grow linearly: a checkpointed block keeps its input only
    assert sequence.activations_at(full, scale) == pytest.approx((1 + 28 * 4) * MIB)
    every2 = case()
    every2.levers = {"activation_checkpointing": "every:2"}
    # half the units keep their scores (4 MiB of the 8), the rest of the 28 MiB linearly
    assert sequence.activations_at(every2, scale) == pytest.approx((1 + 4 * 16 + 24 * 4) * MIB)


def test_the_one_batch_line_starts_at_the_facts_fixed_part():
    # one measured micro-batch: the line goes through the fixed part the facts state, not through zero
    line = activations.fit([case(), case("fsdp")], "w")
    assert line.fixed == pytest.approx(1 * MIB) and line.per_sample == pytest.approx(7 * MIB)
    assert "1 MiB (what the workload's facts say forward keeps whatever the batch) + 7 MiB a sample" in line.describe("w")
    no_facts = case(facts={})
    assert activations.fit([no_facts], "w").fixed == 0


def test_what_cannot_be_read_at_another_length_says_why():
    assert sequence.why_not(case(), 1024) is None
    assert "1024 tokens a sample at most" in sequence.why_not(case(), 2048)
    assert "no sequence" in sequence.why_not(case(facts=dict(FACTS, tokens_per_sample=0, max_tokens_per_sample=0)), 64)
    own = case(facts=dict(FACTS, tokens_per_sample=64, max_tokens_per_sample=64))
    assert "its own 64 tokens a sample only" in sequence.why_not(own, 128)
    assert "records no tokens_per_sample" in sequence.why_not(case(facts={"flops_per_sample": 1.0}), 64)
    assert "no FLOPs" in sequence.why_not(case(facts=dict(FACTS, flops_per_sample=0)), 64)
    with pytest.raises(ProjectionError, match=r"--seq-len 64: no workload of the file can be read at it \(m: it has no"):
        sequence.at_tokens([case(workload="m", facts=dict(FACTS, tokens_per_sample=0))], 64)


def test_pp_and_tp_of_a_rescaled_workload_are_refused_and_a_workload_without_a_sequence_kept():
    cases = [case("single", 1), case("ddp"), case("pp"), case("tp"),
             case("ddp", workload="mlp", facts=dict(FACTS, tokens_per_sample=0, max_tokens_per_sample=0))]
    out, scales, kept = sequence.at_tokens(cases, 64)
    assert [c.name for c in out] == ["w/single/world:1", "w/ddp/world:2", "mlp/ddp/world:2"]
    assert out[2] is cases[4] and list(scales) == ["w"] and kept == {"mlp": "it has no sequence"}
    assert "pp is not read at another sequence length yet" in sequence.refusal("pp", scales["w"])


@pytest.fixture(scope="module")
def gpt2_runs(tmp_path_factory):
    """gpt2 (4 layers, 8 heads, width 256) under single, ddp and fsdp at world 2, at 32 and at 128
    tokens a sample."""
    out = {}
    for tokens in (32, 128):
        path = tmp_path_factory.mktemp(f"seq{tokens}") / "run.json"
        subprocess.run([EXE, "--strategy", "single,ddp,fsdp", "--world-size", "2", "--workload", "gpt2", "--gpt2-size",
                        "4:8:256:512", "--seq-len", str(tokens), "--device", "cpu", "--threads", "1", "--batch", "4",
                        "--steps", "2", "--warmup", "1", "--repetitions", "1", "--parity-steps", "0",
                        "--json", str(path)], check=True, stdout=subprocess.DEVNULL)
        out[tokens] = path
    return out


def medians(path):
    return {b["ddpbench"]["strategy"]: b["ddpbench"] for b in results.load(str(path))["benchmarks"]
            if b.get("aggregate_name") == "median" or b["run_type"] == "iteration"}


def test_a_real_run_at_32_tokens_read_at_128_has_the_activations_measured_at_128(gpt2_runs, tmp_path):
    r = subprocess.run([sys.executable, PROJECT, str(gpt2_runs[32]), "--world", "2", "--seq-len", "128",
                        "--json", str(tmp_path / "p.json")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.load(open(tmp_path / "p.json"))
    assert doc["tokens_per_sample"] == 128
    projected = {p["strategy"]: p for p in doc["projections"] if p["world"] == 2}
    measured = medians(gpt2_runs[128])
    for strategy in ("ddp", "fsdp"):
        m = measured[strategy]["memory"][0]
        # what forward keeps is exact on a CPU: the facts' parts read at 128 tokens meet it to 1%
        assert projected[strategy]["activation_bytes"] == pytest.approx(m["activation_bytes"], rel=0.01), strategy
        # read as measured at 32, it would be a quarter of it and less
        assert medians(gpt2_runs[32])[strategy]["memory"][0]["activation_bytes"] < m["activation_bytes"] / 3.5
    assert "--seq-len: gpt2 measured at 32 tokens a sample, read at 128: compute x4." in r.stdout


def test_the_levers_are_offered_at_the_length_read(gpt2_runs):
    doc = results.load(str(gpt2_runs[32]))
    at_128 = model.project_file(doc, network.load("nvlink4+ndr400", None), [8], strategies=["ddp"], tokens=128)
    plain = model.project_file(doc, network.load("nvlink4+ndr400", None), [8], strategies=["ddp"])
    [p128], [p32] = at_128, plain
    assert p128.activation_bytes > 3.5 * p32.activation_bytes
    # --grad-accum 2 halves the part that grows with the batch as it is at 128 tokens, not at 32
    assert p128.levers[0]["lever"] == p32.levers[0]["lever"] == "--grad-accum 2"
    saved_128 = p128.activation_bytes - p128.levers[0]["activation_bytes"]
    saved_32 = p32.activation_bytes - p32.levers[0]["activation_bytes"]
    assert saved_128 > 3.5 * saved_32


@pytest.mark.parametrize("argv, says", [
    (["--seq-len", "0"], "--seq-len"),
    (["--seq-len", "2048"], "--seq-len 2048: no workload of the file can be read at it (gpt2: its model takes 1024"),
])
def test_a_length_that_cannot_be_read_is_one_line_and_exit_2(gpt2_runs, argv, says):
    r = subprocess.run([sys.executable, PROJECT, str(gpt2_runs[32]), "--world", "2", *argv],
                       capture_output=True, text=True)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and says in r.stderr, r.stderr


def test_pp_at_another_length_is_refused_with_its_reason_in_the_table(gpt2_runs):
    r = subprocess.run([sys.executable, PROJECT, str(gpt2_runs[32]), "--world", "2", "--seq-len", "64",
                        "--strategy", "ddp,pp"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "gpt2/pp" in r.stdout and "refused: --seq-len 64: pp is not read at another sequence length yet" in r.stdout
