"""scripts/check-same-results: a field every old run agrees on must be kept; a field the old runs
disagree on (the machine's) is compared by type only."""
import json
import os
import subprocess
import sys

from build_paths import ROOT

SCRIPT = os.path.join(ROOT, "scripts", "check-same-results")


def doc(step_ms, loss, noisy=False, argv0="/old/ddpbench"):
    return {"context": {"executable": argv0, "ddpbench": {"argv": [argv0, "--steps", "2"], "git_sha": "abc"}},
            "benchmarks": [{"name": "mlp/single/world:1", "real_time": step_ms,
                            "ddpbench": {"final_loss": loss, "noisy": noisy, "status": "ok"}}]}


def run(tmp_path, new, *olds):
    paths = []
    for i, d in enumerate((new,) + olds):
        p = tmp_path / f"{i}.json"
        p.write_text(json.dumps(d))
        paths.append(str(p))
    return subprocess.run([sys.executable, SCRIPT] + paths, capture_output=True, text=True)


def test_times_that_vary_between_old_runs_are_not_compared_but_losses_are(tmp_path):
    r = run(tmp_path, doc(90.0, 2.30, argv0="/new/ddpbench"), doc(80.0, 2.30), doc(85.0, 2.30))
    assert r.returncode == 0, r.stdout
    assert "0 difference(s)" in r.stdout


def test_a_changed_loss_is_a_difference_naming_its_path(tmp_path):
    r = run(tmp_path, doc(80.0, 2.31), doc(80.0, 2.30), doc(85.0, 2.30))
    assert r.returncode == 1
    assert "/benchmarks/0/ddpbench/final_loss: 2.3 before (in every old run), 2.31 now" in r.stdout


def test_a_field_that_agrees_by_chance_in_two_runs_is_released_by_a_third(tmp_path):
    new = doc(80.0, 2.30, noisy=True)
    assert run(tmp_path, new, doc(80.0, 2.30), doc(85.0, 2.30)).returncode == 1
    assert run(tmp_path, new, doc(80.0, 2.30), doc(85.0, 2.30), doc(81.0, 2.30, noisy=True)).returncode == 0


def test_a_missing_key_or_a_changed_type_is_a_difference(tmp_path):
    new = doc(80.0, 2.30)
    del new["benchmarks"][0]["ddpbench"]["status"]
    r = run(tmp_path, new, doc(80.0, 2.30), doc(85.0, 2.30))
    assert r.returncode == 1
    assert "keys ['status'] are in one run only" in r.stdout
    r = run(tmp_path, doc("80", 2.30), doc(80.0, 2.30), doc(85.0, 2.30))
    assert "/benchmarks/0/real_time: number before, str now" in r.stdout


def test_unreadable_input_is_exit_two(tmp_path):
    (tmp_path / "bad.json").write_text("{")
    r = subprocess.run([sys.executable, SCRIPT, str(tmp_path / "bad.json"), str(tmp_path / "bad.json"),
                        str(tmp_path / "bad.json")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "bad.json" in r.stderr
