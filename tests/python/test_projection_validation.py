"""benchmarks/projection_validation.py's summary: signed errors before and after, band coverage, and
a file from before those fields rendering as it did."""
import json
import sys

from build_paths import ROOT  # noqa: E402,F401
sys.path.insert(0, ROOT)
from benchmarks import projection_validation as pv  # noqa: E402


def row(strategy, errors, before=None, bands=None, measured=100.0):
    r = {"setting": "one host, loopback", "workload": "mlp", "strategy": strategy, "world": 2,
         "rounds": len(errors), "predicted_ms": measured * (1 + sorted(errors)[len(errors) // 2]),
         "measured_ms": measured, "round_errors": errors, "predicted_exposed_comm_ms": None,
         "measured_exposed_comm_ms": None}
    if before is not None:
        r["before_round_errors"] = before
    if bands is not None:
        r["band_ms_each_round"] = bands
        r["inside_band_rounds"] = sum(1 for lo, hi in bands if lo <= measured <= hi)
    return r


def test_signed_errors_count_each_side_and_the_band_its_rounds(tmp_path):
    doc = {"rows": [row("ddp", [-0.1, -0.05, 0.0], before=[-0.3, -0.2, -0.25], bands=[(90, 110)] * 3),
                    row("zero2", [0.2, 0.1, 0.15], before=[-0.1, -0.05, -0.1], bands=[(105, 120)] * 3),
                    row("fsdp", [-0.4, -0.5, -0.45], before=[-0.5, -0.5, -0.5], bands=[(50, 60)] * 3)],
           "skipped": []}
    pv.write_outputs(str(tmp_path), doc)
    s = json.load(open(tmp_path / "validation.json"))["summary"]
    assert s["signed"] == {"median": -0.05, "min": -0.45, "max": 0.15, "low": 2, "high": 1, "cases": 3}
    assert (s["signed_before"]["low"], s["signed_before"]["high"]) == (3, 0)
    assert s["signed_sharded"]["cases"] == 2 and s["signed_ddp_dp"]["cases"] == 1
    assert (s["rounds_inside_band"], s["rounds"]) == (3, 9)
    text = (tmp_path / "validation.md").read_text()
    assert "- Now, every case: signed error median -5.0% (from -45.0% to +15.0%), 2 of 3 low and 1 high" in text
    assert "- Before issue 48, every case: signed error median -25.0%" in text
    assert "- Measured step inside the printed band in 3 of 9 rounds." in text
    assert "| mlp/ddp | 2 | -5.0% | -25.0% |" in text and "90.0-110.0 (3/3 in)" in text


def test_a_file_from_before_the_band_renders_without_it(tmp_path):
    pv.write_outputs(str(tmp_path), {"rows": [row("ddp", [-0.1, -0.2, -0.15])], "skipped": []})
    text = (tmp_path / "validation.md").read_text()
    assert "| mlp/ddp | 2 | -15.0% | - |" in text and "inside the printed band" not in text


def test_the_namespace_cases_are_summed_apart_as_issue_48_judges_them(tmp_path):
    netns = dict(row("zero1", [0.02, -0.01, 0.0], bands=[(95, 105), (99, 101), (101, 103)]),
                 setting="two namespaces, 400 Mbit/s")
    doc = {"rows": [row("ddp", [-0.3, -0.3, -0.3], bands=[(60, 70)] * 3), netns], "skipped": []}
    pv.write_outputs(str(tmp_path), doc)
    s = json.load(open(tmp_path / "validation.json"))["summary"]
    assert s["signed_netns"] == {"median": 0.0, "min": 0.0, "max": 0.0, "low": 0, "high": 0, "cases": 1}
    assert (s["netns_rounds_inside_band"], s["netns_rounds"]) == (2, 3)
    assert s["signed"]["cases"] == 2
    text = (tmp_path / "validation.md").read_text()
    assert "- Over the two namespaces, inside the band in 2 of 3 rounds." in text
    assert "- Now, ddp, zero1, zero2 and fsdp over the two namespaces: signed error median +0.0%" in text
