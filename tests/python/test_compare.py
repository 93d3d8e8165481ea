"""ddpbench-compare on two real runs and on doctored copies of them."""
import copy
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402,F401
sys.path.insert(0, ROOT)
from reports import compare  # noqa: E402

DDPBENCH = os.path.join(BUILD, "ddpbench")
SCRIPT = os.path.join(ROOT, "scripts", "ddpbench-compare")


FIXTURE = os.path.join(ROOT, "tests", "python", "fixtures", "compare-baseline.json")


def merge_repetitions(paths, out):
    """One results file holding the repetitions of several one-repetition runs, renumbered."""
    docs = [json.load(open(p)) for p in paths]
    merged = copy.deepcopy(docs[0])
    merged["benchmarks"] = []
    for i, doc in enumerate(docs):
        for b in doc["benchmarks"]:
            if b["run_type"] == "iteration":
                b = copy.deepcopy(b)
                b["repetition_index"] = i
                b["repetitions"] = len(docs)
                merged["benchmarks"].append(b)
    out.write_text(json.dumps(merged))
    return out


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    """An A/A pair: the same build and settings, with A's and B's repetitions run alternately (one
    repetition per ddpbench process) so that drift of the machine hits both sides alike. Two
    runs back to back are no fair A/A here: this VM can run 30% slower for seconds at a time."""
    d = tmp_path_factory.mktemp("aa")
    runs = {"a": [], "b": []}
    for i in range(5):
        for side in ("a", "b"):
            path = d / f"{side}{i}.json"
            subprocess.run([DDPBENCH, "--device", "cpu", "--strategy", "single", "--workload", "mlp,convnet",
                            "--world-size", "1", "--threads", "1", "--batch", "32", "--steps", "20", "--warmup", "3",
                            "--repetitions", "1", "--parity-steps", "0", "--json", str(path)],
                           check=True, stdout=subprocess.DEVNULL)
            runs[side].append(path)
    return [merge_repetitions(runs["a"], d / "a.json"), merge_repetitions(runs["b"], d / "b.json")]


def run_compare(*args):
    return subprocess.run([SCRIPT, *map(str, args)], capture_output=True, text=True)


def scaled(path, factor, tmp_path, name):
    """A copy of a run with every time multiplied by `factor`."""
    doc = json.load(open(path))
    for b in doc["benchmarks"]:
        for key in ("real_time", "cpu_time"):
            if b["run_type"] == "iteration" or b.get("aggregate_name") in ("median", "mean", "stddev"):
                b[key] = b[key] * factor
        if "items_per_second" in b and b["run_type"] == "iteration":
            b["items_per_second"] /= factor
        b["ddpbench"]["step_times_ms"] = [t * factor for t in b["ddpbench"].get("step_times_ms", [])]
    out = tmp_path / name
    out.write_text(json.dumps(doc))
    return out


def test_a_a_on_two_real_runs_passes(two_runs):
    r = run_compare(*two_runs)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "no regression" in r.stdout
    assert "mlp/single/world:1" in r.stdout and "convnet/single/world:1" in r.stdout


def test_every_time_20_percent_slower_is_a_regression(tmp_path):
    # A real run (committed, so its noise is fixed: CV 6.6% and 8.0%) against a copy 20% slower.
    slower = scaled(FIXTURE, 1.2, tmp_path, "slower.json")
    r = run_compare(FIXTURE, slower)
    assert r.returncode == 1, r.stdout
    assert "REGRESSION" in r.stdout
    result = compare.compare(json.load(open(FIXTURE)), json.load(open(slower)))
    assert {c.verdict for c in result.cases} == {"slower"}
    assert all(c.change == pytest.approx(0.2) for c in result.cases)
    assert result.geomean_ratio == pytest.approx(1.2)
    # and the other way round it is faster, which is no regression
    r = run_compare(slower, FIXTURE)
    assert r.returncode == 0 and "faster" in r.stdout


def test_minimum_effect_and_noise_gate_the_verdict(tmp_path):
    base = json.load(open(FIXTURE))
    # 3%: below the default 5% minimum effect, and inside the runs' own noise.
    small = compare.compare(base, json.load(open(scaled(FIXTURE, 1.03, tmp_path, "small.json"))))
    assert not small.regressed
    assert {c.verdict for c in small.cases} <= {"same", "noisy"}
    # 12%: with this fixture's spread the U test cannot separate it (p = 0.22 and 0.056): noisy, not slower.
    twelve = compare.compare(base, json.load(open(scaled(FIXTURE, 1.12, tmp_path, "twelve.json"))))
    assert not twelve.regressed and {c.verdict for c in twelve.cases} == {"noisy"}
    # 18%: significant (p = 0.008) and beyond the noise; a regression at the default 5% minimum
    # effect, not with a 20% one.
    eighteen = json.load(open(scaled(FIXTURE, 1.18, tmp_path, "eighteen.json")))
    assert compare.compare(base, eighteen).regressed
    assert not compare.compare(base, eighteen, min_effect=0.2).regressed


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"context": {"json_schema_version": 7, "ddpbench": {}}, "benchmarks": []}', "json_schema_version 7"),
])
def test_malformed_or_wrong_schema_exits_two(two_runs, tmp_path, content, message):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    for args in ((two_runs[0], bad), (bad, two_runs[0])):
        r = run_compare(*args)
        assert r.returncode == 2
        assert message in r.stderr


def test_cases_on_one_side_only_are_listed_not_fatal(two_runs, tmp_path):
    doc = json.load(open(two_runs[1]))
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["run_name"] != "convnet/single/world:1"]
    fewer = tmp_path / "fewer.json"
    fewer.write_text(json.dumps(doc))
    r = run_compare(two_runs[0], fewer)
    assert r.returncode == 0, r.stdout
    assert "only in baseline: convnet/single/world:1" in r.stdout
    r = run_compare(fewer, two_runs[0])
    assert "only in current: convnet/single/world:1" in r.stdout


def test_a_case_that_fails_now_is_a_regression(two_runs, tmp_path):
    doc = json.load(open(two_runs[1]))
    doc["benchmarks"] = [b for b in doc["benchmarks"] if b["run_name"] != "convnet/single/world:1"]
    failed = copy.deepcopy(next(b for b in json.load(open(two_runs[1]))["benchmarks"]
                                if b["run_name"] == "convnet/single/world:1"))
    failed.update(run_type="iteration", iterations=0, real_time=0, error_occurred=True, error_message="boom")
    failed["ddpbench"].update(status="failed", reason="boom")
    doc["benchmarks"].append(failed)
    now_failing = tmp_path / "failing.json"
    now_failing.write_text(json.dumps(doc))
    r = run_compare(two_runs[0], now_failing)
    assert r.returncode == 1
    assert "failed" in r.stdout


def test_markdown_table(two_runs):
    r = run_compare(two_runs[0], two_runs[1], "--markdown")
    assert r.returncode == 0
    assert r.stdout.startswith("| case | baseline ms |")


def test_runs_of_different_dtypes_are_not_compared(two_runs, tmp_path):
    doc = json.load(open(two_runs[1]))
    doc["context"]["ddpbench"]["settings"]["dtype"] = "bf16"
    bf16 = tmp_path / "bf16.json"
    bf16.write_text(json.dumps(doc))
    r = run_compare(two_runs[0], bf16)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("\n") == 1 and "--dtype bf16" in r.stderr and "ran fp32" in r.stderr
    assert r.stdout == ""
