"""reports.results against real ddpbench output and against broken files."""
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402,F401
sys.path.insert(0, ROOT)
from reports import results  # noqa: E402

DDPBENCH = os.path.join(BUILD, "ddpbench")


def registered_strategies():
    """The strategies `all` expands to, from the binary's own --list."""
    out = subprocess.run([DDPBENCH, "--list"], check=True, capture_output=True, text=True).stdout
    section = out.split("strategies:\n", 1)[1].split("workloads:", 1)[0]
    return [line.split()[0] for line in section.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    path = tmp_path_factory.mktemp("run") / "results.json"
    # Two workloads under every strategy; transformer rather than wide-logits, whose 16.8M
    # parameters made this run take 52 s instead of 22 on the 2-core VM for nothing read here. Two
    # repetitions and no parity pass (nothing here reads it): 46 s instead of 85 (2026-11-28).
    subprocess.run([DDPBENCH, "--device", "cpu", "--strategy", "all", "--workload", "mlp,transformer",
                    "--steps", "2", "--warmup", "1", "--repetitions", "2", "--parity-steps", "0", "--batch", "8",
                    "--dataset-size", "16", "--json", str(path)], check=True, stdout=subprocess.DEVNULL)
    return path


def test_reads_a_real_run(real_run):
    doc = results.load(real_run)
    med = results.medians(doc)
    assert {"mlp/single/world:1", "transformer/single/world:1"} <= set(med)
    for entry in med.values():
        assert entry["repetitions"] == 2
        assert entry["items_per_second"] > 0
        assert entry["ddpbench"]["status"] == "ok"
    # Every case of the run is either measured or skipped with its reason: none silently dropped.
    names = {b["run_name"] for b in doc["benchmarks"]}
    assert len(names) == 2 * len(registered_strategies())
    skipped = {b["run_name"]: b for b in doc["benchmarks"] if b["ddpbench"]["status"] == "skipped"}
    assert set(med) | set(skipped) == names
    assert all(b["ddpbench"]["reason"] and b["error_occurred"] for b in skipped.values())


def test_refuses_an_unknown_schema_version(real_run, tmp_path):
    doc = json.loads(real_run.read_text())
    doc["context"]["json_schema_version"] = 99
    path = tmp_path / "future.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(results.ResultsError, match="json_schema_version 99"):
        results.load(path)


@pytest.mark.parametrize("content, message", [
    ('{"context": {}, "benchmarks": [', "not valid JSON"),
    ('[1, 2]', "not a ddpbench results file"),
    ('{"context": {"json_schema_version": 1}, "benchmarks": []}', "context.ddpbench is missing"),
])
def test_refuses_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(results.ResultsError, match=message):
        results.load(path)


def test_missing_file_names_the_path(tmp_path):
    with pytest.raises(results.ResultsError, match="nothing-here.json"):
        results.load(tmp_path / "nothing-here.json")


def test_dtype_and_tflops_of_a_real_run(real_run):
    doc = results.load(real_run)
    assert results.dtype(doc) == "fp32"
    med = results.medians(doc)["mlp/single/world:1"]["ddpbench"]
    achieved = med["compute"]["achieved_tflops"]
    assert achieved > 0
    assert results.tflops_text(med) == f"{achieved:.3g}"  # a CPU run: no peak to read it against
    with_peak = dict(med, compute=dict(med["compute"], peak_tflops=2 * achieved, fraction_of_peak=0.5))
    assert results.tflops_text(with_peak).endswith("(50% of " + f"{2 * achieved:.4g})")
    del doc["context"]["ddpbench"]["settings"]["dtype"]  # a file from before --dtype
    assert results.dtype(doc) == "fp32"


def test_reads_a_run_whose_memory_by_kind_is_null(tmp_path):
    # hogwild's worker processes are out of the parent's sight: their memory by kind is null
    # (docs/json.md). The non-negative check once compared null with 0 and every script crashed
    # on such a file.
    path = tmp_path / "hogwild.json"
    subprocess.run([DDPBENCH, "--device", "cpu", "--strategy", "hogwild", "--hogwild-mode", "processes",
                    "--workload", "mlp", "--world-size", "2", "--steps", "2", "--warmup", "1",
                    "--repetitions", "1", "--batch", "8", "--dataset-size", "16", "--json", str(path)],
                   check=True, stdout=subprocess.DEVNULL)
    doc = results.load(path)
    entry = results.medians(doc)["mlp/hogwild/world:2"]["ddpbench"]
    assert entry["memory"] and all(m["parameter_bytes"] is None for m in entry["memory"])
    # A negative figure on the same path is still refused.
    raw = json.loads(path.read_text())
    raw["benchmarks"][0]["ddpbench"]["memory"][0]["parameter_bytes"] = -1
    path.write_text(json.dumps(raw))
    with pytest.raises(results.ResultsError, match="parameter_bytes is negative"):
        results.load(path)


# Every script's inputs go through reports.files.read_regular_file: a device is never read (it
# could be endless: /dev/zero), a FIFO is never waited on, a directory is not a file. Each is one
# line naming the input, exit 2, promptly.
SCRIPTS = os.path.join(ROOT, "scripts")
FIXTURE = os.path.join(ROOT, "tests", "python", "fixtures", "mlp-cpu-world2.json")


@pytest.mark.parametrize("kind", ["device", "fifo", "directory"])
@pytest.mark.parametrize("command", [["ddpbench-compare", FIXTURE, "{}"], ["ddpbench-compare", "{}", FIXTURE],
                                     ["ddpbench-report", "{}", "--out", "{out}"], ["ddpbench-project", "{}"],
                                     ["ddpbench-project", FIXTURE, "--network", "{}"]],
                         ids=["compare-current", "compare-baseline", "report", "project", "project-network"])
def test_inputs_that_are_not_regular_files_are_refused_at_once(tmp_path, kind, command):
    if kind == "device":
        path = "/dev/zero"
    elif kind == "fifo":
        path = str(tmp_path / "fifo")
        os.mkfifo(path)  # nobody ever writes to it: reading it would block for good
    else:
        path = str(tmp_path)
    args = [a.replace("{}", path).replace("{out}", str(tmp_path / "report")) for a in command]
    r = subprocess.run([sys.executable, os.path.join(SCRIPTS, args[0])] + args[1:], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert path in r.stderr and "not a regular file" in r.stderr, r.stderr
    assert not os.path.exists(tmp_path / "report")


def test_read_regular_file_reads_a_regular_file_whole(tmp_path):
    from reports import files
    path = tmp_path / "big"
    data = os.urandom(3 * (1 << 20) + 17)  # more than one read's chunk
    path.write_bytes(data)
    assert files.read_regular_file(str(path)) == data
    with pytest.raises(OSError, match="larger than"):
        files.read_regular_file(str(path), limit=1024)
