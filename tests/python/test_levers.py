"""ddpbench-levers (reports/lever_sweep.py) and the lever comparison it draws and says
(reports/levers.py): a real sweep of the built ddpbench, its files, chart and why lines, held to the
figures in the files it wrote; the verdicts' "cannot tell"; bad input."""
import copy
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT

sys.path.insert(0, ROOT)
from reports import levers, stats  # noqa: E402
from reports.cases import collect_cases  # noqa: E402

LEVERS = os.path.join(ROOT, "scripts", "ddpbench-levers")
RUN = ["--device", "cpu", "--workload", "mlp", "--strategy", "single", "--batch", "32", "--dataset-size", "64",
       "--steps", "3", "--warmup", "1", "--parity-steps", "0"]


def sweep(out, *ours, run=RUN):
    return subprocess.run(["/usr/bin/python3", LEVERS, "--out", str(out), "--ddpbench", os.path.join(BUILD, "ddpbench"),
                           *ours, "--", *run], capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    out = tmp_path_factory.mktemp("sweep")
    done = sweep(out, "--activation-checkpointing", "none", "--grad-accum", "1,2", "--rounds", "2")
    assert done.returncode == 0, done.stderr
    return out, done


def load(path):
    with open(path) as f:
        return json.load(f)


def test_each_setting_gets_its_rounds_as_repetitions_and_nothing_else_is_left(swept):
    out, _ = swept
    assert sorted(os.listdir(out)) == ["ac-none_accum-1.json", "ac-none_accum-2.json", "report"]
    for name, k in (("ac-none_accum-1", 1), ("ac-none_accum-2", 2)):
        doc = load(out / f"{name}.json")
        assert doc["context"]["ddpbench"]["settings"]["strategy_settings"]["levers"]["grad_accum"] == k
        assert doc["context"]["ddpbench_levers"]["setting"] == name
        reps = [b for b in doc["benchmarks"] if b["run_type"] == "iteration"]
        assert [b["repetition_index"] for b in reps] == [0, 1]
        assert reps[0]["ddpbench"]["micro_batches"] == k


def test_the_report_draws_the_levers_chart(swept):
    out, _ = swept
    with open(out / "report" / "levers.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
    with open(out / "report" / "index.html", encoding="utf-8") as f:
        assert "Memory levers against the plain run" in f.read()


def test_the_why_line_says_what_the_files_hold(swept):
    """The line's activations and peak are the files' own (each side's first repetition, fullest
    device), and halving the micro-batch halves mlp's saved activations."""
    out, done = swept
    figures = {}
    for k in (1, 2):
        memory = [b for b in load(out / f"ac-none_accum-{k}.json")["benchmarks"] if b["run_type"] == "iteration"][0]["ddpbench"]["memory"]
        figures[k] = (max(m["activation_bytes"] for m in memory), max(m["peak_allocated_bytes"] for m in memory))
    (line,) = [x for x in done.stdout.splitlines() if x.startswith("mlp/single world 1: grad-accum 2:")]
    act1, act2 = figures[1][0] / 2 ** 20, figures[2][0] / 2 ** 20
    assert f"activations {act1:.1f} -> {act2:.1f} MiB" in line
    assert abs(figures[1][0] / figures[2][0] - 2.0) < 0.05, figures
    assert f"peak {figures[1][1] / 2 ** 20:.1f} -> {figures[2][1] / 2 ** 20:.1f} MiB" in line
    assert "throughput" in line


def set_levers(context, policy, k):
    """The levers a file ran with (the fixture was written before they were recorded)."""
    context["ddpbench"].setdefault("settings", {}).setdefault("strategy_settings", {})["levers"] = {
        "activation_checkpointing": policy, "grad_accum": k, "sync_every_microbatch": False, "no_sync_accum": False}


def cases_with_throughputs(base_tput, lever_tput, sweep_id="s"):
    """Two cases of the fixture's mlp/dp, one without levers and one with grad-accum 2, their
    repetitions' throughputs set as given: the verdict's arithmetic alone."""
    with open(os.path.join(ROOT, "tests", "python", "fixtures", "mlp-cpu-world2.json")) as f:
        doc = json.load(f)
    docs = []
    for name, k, tputs in (("plain.json", 1, base_tput), ("accum.json", 2, lever_tput)):
        d = copy.deepcopy(doc)
        set_levers(d["context"], "none", k)
        d["context"]["ddpbench_levers"] = {"sweep": sweep_id, "setting": name}
        first = next(b for b in d["benchmarks"] if b["run_type"] == "iteration" and b["ddpbench"]["strategy"] == "dp")
        d["benchmarks"] = []
        for i, t in enumerate(tputs):
            b = copy.deepcopy(first)
            b["items_per_second"], b["repetition_index"] = t, i
            d["benchmarks"].append(b)
        docs.append((name, d))
    return collect_cases(docs)


def test_one_repetition_a_side_cannot_tell():
    (line,) = levers.why_lines(cases_with_throughputs([100.0], [50.0]))
    assert "cannot tell (one repetition a side" in line


def test_a_spread_that_holds_one_cannot_tell_and_a_clear_drop_is_said_with_its_interval():
    (line,) = levers.why_lines(cases_with_throughputs([100.0, 80.0, 120.0], [110.0, 75.0, 118.0]))
    assert "throughput cannot tell" in line and "which holds 1.0x" in line
    (line,) = levers.why_lines(cases_with_throughputs([100.0, 101.0, 99.0], [70.0, 71.0, 69.5]))
    lo, hi = stats.paired_ratio_interval([100.0, 101.0, 99.0], [70.0, 71.0, 69.5])
    assert f"at 0.70x throughput ({lo:.2f}-{hi:.2f}x at 95%)" in line


def test_files_of_different_sweeps_are_not_paired():
    """Cases of separate runs share no rounds: Welch's interval, not the paired one."""
    cases = cases_with_throughputs([100.0, 101.0, 99.0], [70.0, 71.0, 69.5])
    cases[1].context = dict(cases[1].context, ddpbench_levers={"sweep": "another"})
    (line,) = levers.why_lines(cases)
    lo, hi = stats.ratio_interval([100.0, 101.0, 99.0], [70.0, 71.0, 69.5])
    assert f"({lo:.2f}-{hi:.2f}x at 95%)" in line


def test_a_group_without_a_plain_run_says_so():
    cases = cases_with_throughputs([100.0], [50.0])
    cases[0].context = copy.deepcopy(cases[0].context)
    set_levers(cases[0].context, "full", 1)
    assert levers.why_lines(cases) == ["mlp/dp world 2: ran only with levers, no plain run to compare with"]


@pytest.mark.parametrize("ours, run, names", [
    (["--activation-checkpointing", "every:0"], RUN, "--activation-checkpointing"),
    (["--grad-accum", "1,x"], RUN, "--grad-accum"),
    (["--activation-checkpointing", "none", "--grad-accum", "1"], RUN, "one setting"),
    (["--rounds", "0"], RUN, "--rounds"),
    ([], RUN + ["--grad-accum", "2"], "--grad-accum: give it to ddpbench-levers"),
    ([], RUN + ["--repetitions", "3"], "--repetitions"),
])
def test_bad_input_is_one_line_and_exit_two_before_anything_runs(tmp_path, ours, run, names):
    out = tmp_path / "out"
    done = sweep(out, *ours, run=run)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and names in done.stderr, done.stderr
    assert not out.exists()


def test_a_setting_ddpbench_refuses_ends_the_sweep_with_its_line_and_leaves_no_file(tmp_path):
    """K = 3 does not divide the batch of 32: ddpbench's own line, exit 2, and the rounds already
    run (K = 1's) removed."""
    done = sweep(tmp_path, "--activation-checkpointing", "none", "--grad-accum", "1,3", "--rounds", "1")
    assert done.returncode == 2, done.stderr
    assert "--grad-accum" in done.stderr.strip().splitlines()[-1]
    assert os.listdir(tmp_path) == []
