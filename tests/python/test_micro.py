"""ddpbench-micro's Google Benchmark JSON through the same report and compare scripts."""
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402,F401
sys.path.insert(0, ROOT)
from reports import compare, report, results  # noqa: E402

MICRO = os.path.join(BUILD, "benchmarks", "ddpbench-micro")


@pytest.fixture(scope="module")
def micro_json(tmp_path_factory):
    path = tmp_path_factory.mktemp("micro") / "micro.json"
    subprocess.run([MICRO, "--benchmark_filter=BM_GlooAllreduce/(4096|16384|65536)/|BM_ReplicateCopy/(4096|65536)/",
                    "--benchmark_min_time=0.01", "--benchmark_repetitions=2", f"--benchmark_out={path}",
                    "--benchmark_out_format=json"], check=True, stdout=subprocess.DEVNULL)
    return path


def test_micro_file_is_recognised_and_carries_bandwidths(micro_json):
    doc = results.load(micro_json)
    assert results.is_micro(doc)
    gloo = [b for b in doc["benchmarks"] if b["name"].startswith("BM_GlooAllreduce") and b["run_type"] == "iteration"]
    assert {b["bytes"] for b in gloo} == {4096, 16384, 65536}
    for b in gloo:
        # nccl-tests: with two ranks busbw = algbw * 2 (n - 1) / n = algbw, and both are bytes / time.
        assert b["busbw"] == pytest.approx(b["algbw"])
        assert b["algbw"] == pytest.approx(b["bytes"] / (b["real_time"] * 1e-9), rel=1e-6)


def test_report_draws_bandwidth_against_size(micro_json, tmp_path):
    index, charts = report.write_report([str(micro_json)], str(tmp_path / "out"))
    assert [os.path.basename(c) for c in charts] == ["micro.png"]
    page = open(index).read()
    assert page.count("data:image/png;base64,") == 1
    assert "BM_GlooAllreduce/16384/real_time" in page


def test_compare_reads_micro_files(micro_json):
    doc = json.load(open(micro_json))
    result = compare.compare(doc, doc)
    assert not result.regressed
    assert {c.name for c in result.cases} >= {"BM_GlooAllreduce/65536/real_time", "BM_ReplicateCopy/4096/real_time"}


def test_compare_script_takes_micro_files_and_refuses_mixing_them_with_runs(micro_json):
    script = os.path.join(ROOT, "scripts", "ddpbench-compare")
    r = subprocess.run([script, str(micro_json), str(micro_json)], capture_output=True, text=True)
    assert r.returncode in (0, 3), r.stdout + r.stderr  # two repetitions a side: maybe too few to tell
    assert "BM_GlooAllreduce/16384/real_time" in r.stdout and "Traceback" not in r.stderr
    # Each row in the unit its times need, as Google Benchmark prints them: a copy of 4 KiB takes
    # microseconds, and "0.00 ms" would say nothing.
    row = next(line for line in r.stdout.splitlines() if line.startswith("BM_ReplicateCopy/4096/real_time"))
    assert " 0.00 " not in row and ("us" in row.split() or "ns" in row.split()), row
    run = os.path.join(ROOT, "tests", "python", "fixtures", "compare-baseline.json")
    r = subprocess.run([script, run, str(micro_json)], capture_output=True, text=True)
    assert r.returncode == 2 and "is a ddpbench-micro file and the other a ddpbench run" in r.stderr
    assert r.stderr.count("\n") == 1
