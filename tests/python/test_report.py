"""ddpbench-report on real results: charts written, embedded, escaped, and rendered by Chromium; and
on fuzzed hostile files, which get an exit code, never a traceback."""
import contextlib
import io
import json
import os
import shutil
import subprocess
import sys

import pytest
from hypothesis import HealthCheck, given, settings

import hostile
from build_paths import BUILD, ROOT, small_run  # noqa: E402,F401
sys.path.insert(0, ROOT)
from reports import cases as report_cases  # noqa: E402
from reports import charts, report  # noqa: E402
from reports.results import TO_MS  # noqa: E402

FIXTURES = os.path.join(ROOT, "tests", "python", "fixtures")
WORLD2 = os.path.join(FIXTURES, "mlp-cpu-world2.json")
WORLD3 = os.path.join(FIXTURES, "mlp-cpu-world3.json")
SCRIPT = os.path.join(ROOT, "scripts", "ddpbench-report")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_writes_every_chart_and_a_page_that_embeds_them(tmp_path):
    out = tmp_path / "report"
    r = subprocess.run([SCRIPT, WORLD2, WORLD3, "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    expected = {"throughput.png", "scaling.png", "memory.png", "memory_vs_throughput.png", "phases.png",
                "step_times.png"}
    assert expected <= set(os.listdir(out))
    for name in expected:
        assert (out / name).read_bytes().startswith(PNG_MAGIC), name
    page = (out / "index.html").read_text()
    assert page.count("src='data:image/png;base64,") == len(expected)
    # Self-contained: no request leaves the page.
    assert "http://" not in page and "https://" not in page and "<script" not in page
    for case in ("mlp/single/world:1", "mlp/dp/world:2", "mlp/dp-loss-in-model/world:3"):
        assert case in page
    assert "Parity with single" in page and "Verdict per workload" in page


def test_cases_of_several_files_carry_what_tells_their_files_apart():
    assert report_cases.source_tags(["all-h100-fp32.json", "all-h100-bf16.json", "all-h100-fp16.json"]) == {
        "all-h100-fp32.json": "fp32", "all-h100-bf16.json": "bf16", "all-h100-fp16.json": "fp16"}
    assert report_cases.source_tags(["run.json"]) == {"run.json": ""}  # one file: labels as they were
    # A name that is all prefix of another keeps its whole name rather than an empty tag.
    assert report_cases.source_tags(["a.json", "ab.json"]) == {"a.json": "a.json", "ab.json": "b"}
    docs = [(os.path.basename(p), json.load(open(p))) for p in (WORLD2, WORLD3)]
    tags = {c.tag for c in report_cases.collect_cases(docs)}
    assert tags == {"2", "3"}


def test_page_shows_ddpbenchs_own_explanation(tmp_path):
    doc = json.load(open(WORLD2))
    doc["ddpbench"] = {"why": [{"workload": "mlp", "fastest": "mlp/dp/world:2",
                                "lines": ["mlp/dp/world:2 is fastest: 1 samples/s",
                                          "mlp/single/world:1: 0.50x the fastest's throughput; most extra time in backward"]}]}
    path = tmp_path / "why.json"
    path.write_text(json.dumps(doc))
    index, _ = report.write_report([str(path)], str(tmp_path / "out"))
    page = open(index).read()
    assert "most extra time in backward" in page
    assert "fastest is" not in page  # the computed fallback is not used when ddpbench explained


def test_scaling_chart_needs_two_world_sizes(tmp_path):
    _, charts = report.write_report([WORLD2], str(tmp_path))
    assert "scaling.png" not in {os.path.basename(c) for c in charts}


def test_hostile_strings_are_escaped(tmp_path):
    doc = json.load(open(WORLD2))
    doc["context"]["host_name"] = "<script>alert('host')</script>"
    doc["context"]["ddpbench"]["argv"].append("<img src=x onerror=alert(1)>")
    for b in doc["benchmarks"]:
        if b["ddpbench"]["status"] == "skipped":
            b["ddpbench"]["reason"] = "<b>bold</b> & <i>reason</i>"
    hostile = tmp_path / "hostile.json"
    hostile.write_text(json.dumps(doc))
    index, _ = report.write_report([str(hostile)], str(tmp_path / "out"))
    page = open(index).read()
    assert "<script>" not in page and "<img src=x" not in page and "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&#x27;host&#x27;)&lt;/script&gt;" in page
    assert "&lt;b&gt;bold&lt;/b&gt; &amp; &lt;i&gt;reason&lt;/i&gt;" in page


def test_unknown_schema_exits_two_and_writes_nothing(tmp_path):
    doc = json.load(open(WORLD2))
    doc["context"]["json_schema_version"] = 2
    bad = tmp_path / "v2.json"
    bad.write_text(json.dumps(doc))
    out = tmp_path / "out"
    r = subprocess.run([SCRIPT, str(bad), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "json_schema_version 2" in r.stderr
    assert not out.exists()


def test_page_renders_in_headless_chromium(tmp_path):
    chromium = shutil.which("chromium")
    assert chromium, "chromium is missing: scripts/setup.sh installs it"
    index, _ = report.write_report([WORLD2, WORLD3], str(tmp_path / "out"))
    shot = tmp_path / "shot.png"
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars", "--window-size=1200,1600",
                    f"--screenshot={shot}", f"file://{index}"],
                   check=True, capture_output=True, timeout=120)
    import matplotlib.image
    pixels = matplotlib.image.imread(str(shot))
    assert pixels.shape[0] >= 1000 and pixels.shape[1] >= 1000
    # A blank page is one colour; text, tables and charts make many.
    assert pixels[..., :3].std() > 0.05
    dark = (pixels[..., :3].mean(axis=2) < 0.5).mean()
    assert 0.005 < dark < 0.5, f"share of dark pixels {dark:.3f}"


def test_asynchronous_cases_get_their_loss_against_samples_seen(tmp_path):
    # A real run of single and hogwild: the loss chart appears, with one curve per case.
    hogwild = os.path.join(FIXTURES, "mlp-hogwild-cpu-world2.json")
    index, _ = report.write_report([hogwild], str(tmp_path / "out"))
    assert (tmp_path / "out" / "loss.png").read_bytes().startswith(PNG_MAGIC)
    assert "Loss against samples seen" in open(index).read()
    # Without an asynchronous case there is no loss chart: every curve would match single's.
    report.write_report([WORLD2], str(tmp_path / "plain"))
    assert not (tmp_path / "plain" / "loss.png").exists()


def write_doc(tmp_path, doc, name="doc.json"):
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_step_time_column_has_the_time_and_its_interval(tmp_path):
    # Issue 43 item 11: the column "step time +-95%" held the interval alone.
    docs = [("w2.json", json.load(open(WORLD2)))]
    for c in report_cases.collect_cases(docs):
        text = report.step_time_text(c)
        if not c.throughputs:
            assert text == "-"
            continue
        ms = c.median["real_time"] * TO_MS[c.median["time_unit"]]
        assert text.startswith(f"{ms:.3g} ms"), text
        assert text.endswith(report.precision_text(c.fields)) or report.precision_text(c.fields) == "-"


def test_coinciding_points_share_one_label():
    # Issue 43 item 11: labels of points at one place were drawn one over the other.
    labelled = charts.shared_labels([("ddp 2", 100.0, 50.0), ("zero1 2", 100.2, 50.1), ("single 1", 40.0, 30.0)])
    assert labelled == [((100.0, 50.0), "ddp 2, zero1 2"), ((40.0, 30.0), "single 1")]
    assert len(charts.shared_labels([("a", 100.0, 50.0), ("b", 80.0, 50.0)])) == 2


def test_an_interrupted_run_says_so_at_the_top(tmp_path):
    doc = json.load(open(WORLD2))
    doc["context"]["ddpbench"]["complete"] = False
    doc["context"]["ddpbench"]["interruption"] = "interrupted by SIGINT"
    index, _ = report.write_report([write_doc(tmp_path, doc, "stopped.json")], str(tmp_path / "out"))
    page = open(index).read()
    top = page.index("stopped.json: an interrupted run (interrupted by SIGINT)")
    assert top < page.index("Verdict per workload")
    whole, _ = report.write_report([WORLD2], str(tmp_path / "whole"))
    assert "an interrupted run" not in open(whole).read()


def test_dollar_signs_in_names_are_text_not_math(tmp_path):
    doc = json.load(open(WORLD2))
    for b in doc["benchmarks"]:
        b["run_name"] = b["run_name"].replace("mlp/", "mlp $\\frac{x$ /")
    index, charts = report.write_report([write_doc(tmp_path, doc)], str(tmp_path / "out"))
    assert "step_times.png" in {os.path.basename(c) for c in charts}
    assert "mlp $\\frac{x$ /dp/world:2" in open(index).read()


def test_extreme_values_are_refused_with_one_line(tmp_path):
    doc = json.load(open(WORLD2))
    next(b for b in doc["benchmarks"] if b["run_type"] == "iteration")["items_per_second"] = 1e308
    out = tmp_path / "out"
    r = subprocess.run([SCRIPT, write_doc(tmp_path, doc), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert "items_per_second is 1e+308, not a usable number" in r.stderr
    assert not out.exists()


def test_an_output_that_is_a_file_exits_two(tmp_path):
    target = tmp_path / "taken"
    target.write_text("keep me")
    r = subprocess.run([SCRIPT, WORLD2, "-o", str(target)], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "is a file, not a directory" in r.stderr
    assert target.read_text() == "keep me"


def test_failed_cases_are_never_ranked(tmp_path):
    """A case that failed in a later repetition keeps its earlier ones, marked errors: it is listed
    as failed, and neither the verdict nor the charts rank it."""
    doc = json.load(open(WORLD2))
    doc.pop("ddpbench", None)  # the verdict computed here, from throughput
    for b in doc["benchmarks"]:
        if b["run_name"] == "mlp/dp/world:2":
            b["ddpbench"].update(status="failed", reason="rank 1 died", partial=True)
            b.update(error_occurred=True, error_message="rank 1 died")
            b["items_per_second"] = b.get("items_per_second", 1) * 100  # would be fastest by far
    index, _ = report.write_report([write_doc(tmp_path, doc)], str(tmp_path / "out"))
    page = open(index).read()
    assert "<td>mlp/dp/world:2</td><td>failed</td>" in page
    verdicts = page[page.index("Verdict per workload"):page.index("<h2>Cases")]
    assert "dp world 2" not in verdicts and "fastest is" in verdicts


@settings(max_examples=40, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(content=hostile.hostile_file_bytes([json.load(open(WORLD2)),
                                           json.load(open(os.path.join(FIXTURES, "mlp-hogwild-cpu-world2.json")))]))
def test_fuzzed_files_get_an_exit_code_never_a_traceback(tmp_path, content):
    path = tmp_path / "fuzzed.json"
    path.write_bytes(content)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = report.main([str(path), "-o", str(tmp_path / "out")])
        except SystemExit as e:
            code = e.code
    assert code in (0, 2)
    if code == 2:
        assert err.getvalue().count("\n") == 1, err.getvalue()


def test_memory_by_kind_is_charted_where_the_split_is_known_and_only_there(tmp_path):
    doc = json.load(open(WORLD2))
    without = tmp_path / "without"
    r = subprocess.run([SCRIPT, WORLD2, "-o", str(without)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "memory_by_kind.png" not in os.listdir(without)  # an older file: no split, no chart
    for b in doc["benchmarks"]:
        for m in b["ddpbench"].get("memory") or []:
            peak = m["peak_allocated_bytes"]
            m.update(parameter_bytes=peak // 4, gradient_bytes=peak // 4, optimizer_state_bytes=peak // 8,
                     other_bytes=peak - peak // 4 - peak // 4 - peak // 8)
    path = tmp_path / "kinds.json"
    path.write_text(json.dumps(doc))
    out = tmp_path / "with"
    r = subprocess.run([SCRIPT, str(path), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "memory_by_kind.png").read_bytes().startswith(PNG_MAGIC)
    assert "Memory by kind" in (out / "index.html").read_text()


def test_memory_against_throughput_has_one_point_per_case_at_its_fullest_device_and_median(tmp_path):
    docs = [("w2", json.load(open(WORLD2))), ("w3", json.load(open(WORLD3)))]
    cases = report_cases.collect_cases(docs)
    points = charts.memory_throughput_points(cases)
    assert len(points) == len(report_cases.measured(cases)) > 3
    for c, mib, tput in points:
        peaks = [m["peak_allocated_bytes"] for m in c.median["ddpbench"]["memory"]]
        assert mib == max(peaks) / 2 ** 20 and mib > 0
        assert tput == report.stats.median(c.throughputs) > 0
    # A case without memory figures (an older file, or memory not measured) is left out, not drawn at 0.
    for b in docs[0][1]["benchmarks"]:
        b["ddpbench"].pop("memory", None)
    assert len(charts.memory_throughput_points(report_cases.collect_cases(docs))) == len(
        report_cases.measured(report_cases.collect_cases(docs[1:])))
    path = charts.chart_memory_vs_throughput(cases, str(tmp_path))
    assert open(path, "rb").read().startswith(PNG_MAGIC)


def _report_under_file_size_limit(results_files, out, blocks=40):
    """ddpbench-report in a child shell whose file-size limit (dash: 512-byte blocks) is below a chart's
    size: every write past it fails with EFBIG (Python ignores SIGXFSZ), as on a full disk."""
    command = "ulimit -f %d; exec \"$0\" \"$@\"" % blocks
    return subprocess.run(["/bin/sh", "-c", command, SCRIPT, *map(str, results_files), "-o", str(out)],
                          capture_output=True, text=True)


def _files(directory):
    return {p.name: p.read_bytes() for p in directory.iterdir()}


def test_a_failed_write_leaves_no_report_and_no_temporary_file(tmp_path):
    out = tmp_path / "report"
    r = _report_under_file_size_limit([WORLD2, WORLD3], out)
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    assert f"-o {out}: File too large" in r.stderr
    assert sorted(os.listdir(tmp_path)) == [], "a failed report left something behind"


def test_a_failed_write_over_an_earlier_report_leaves_it_whole(tmp_path):
    out = tmp_path / "report"
    assert subprocess.run([SCRIPT, WORLD2, WORLD3, "-o", str(out)], capture_output=True).returncode == 0
    earlier = _files(out)
    r = _report_under_file_size_limit([WORLD2], out)
    assert r.returncode == 2 and "File too large" in r.stderr, r.stderr
    assert _files(out) == earlier, "the earlier report was torn"
    assert sorted(os.listdir(tmp_path)) == ["report"]


def test_a_new_report_replaces_the_earlier_ones_files_and_keeps_others(tmp_path):
    out = tmp_path / "report"
    assert subprocess.run([SCRIPT, WORLD2, WORLD3, "-o", str(out)], capture_output=True).returncode == 0
    assert (out / "scaling.png").exists()
    (out / "notes.txt").write_text("mine")
    r = subprocess.run([SCRIPT, WORLD2, "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    # One world size: no scaling chart this time, so the earlier one goes with the earlier page.
    assert not (out / "scaling.png").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert "mlp/dp-loss-in-model/world:3" not in (out / "index.html").read_text()
    assert not [n for n in os.listdir(out) if n.startswith(".")], "the staging directory was left"


def test_a_pp_case_gets_its_pipeline_timeline_from_the_runs_trace(tmp_path):
    """A real pp run with --trace: the report draws one row a rank from the trace files, the step's
    forwards and backwards as the ranks ran them; without --trace there is no timeline, and a
    --trace folder with no trace files is one line and exit code 2."""
    from reports import pipeline_timeline
    trace, run = tmp_path / "trace", tmp_path / "pp.json"
    trace.mkdir()
    r = subprocess.run([os.path.join(BUILD, "ddpbench"), "--device", "cpu", "--strategy", "pp", "--workload", "mlp",
                        "--batch", "16", "--steps", "2", "--warmup", "1", "--repetitions", "1", "--parity-steps", "0",
                        "--pp-schedule", "gpipe", "--microbatches", "4", "--trace", str(trace), "--json", str(run)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "report"
    r = subprocess.run([SCRIPT, str(run), "-o", str(out), "--trace", str(trace)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "pipeline_timeline.png").read_bytes().startswith(PNG_MAGIC)
    assert "Pipeline timeline: mlp/pp/world:2" in (out / "index.html").read_text()

    timeline = pipeline_timeline.one_step(pipeline_timeline.load_traces(str(trace))["mlp/pp/world:2"])
    assert sorted(timeline) == [0, 1]
    for rank in (0, 1):
        names = [n for n, _, _ in timeline[rank] if n in ("forward", "backward")]
        # GPipe: the four micro-batches' forwards, then their backwards.
        assert names == ["forward"] * 4 + ["backward"] * 4, (rank, names)
    first = {rank: next(s for n, s, _ in timeline[rank] if n == "forward") for rank in (0, 1)}
    ends = [s + d for n, s, d in timeline[0] if n == "forward"]
    assert first[1] >= ends[0] - 0.05, "rank 1's first forward waits for rank 0's to end"

    plain = tmp_path / "plain"
    r = subprocess.run([SCRIPT, str(run), "-o", str(plain)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not (plain / "pipeline_timeline.png").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    r = subprocess.run([SCRIPT, str(run), "-o", str(tmp_path / "never"), "--trace", str(empty)], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "--trace" in r.stderr and "no ddpbench-rank" in r.stderr, r.stderr
    assert not (tmp_path / "never").exists()


def test_memory_against_throughput_places_tp_and_pp_beside_ddp_from_a_real_run(tmp_path):
    """The choice issue 45 asks the report to show: model parallelism (tp, pp) on the same chart as data
    parallelism, one point per layout, each at its rank 0's peak and its throughput."""
    results = tmp_path / "r.json"
    small_run(results, "ddp,tp,pp")
    cases = report_cases.collect_cases([("r", json.load(open(results)))])
    points = {c.strategy: (mib, tput) for c, mib, tput in charts.memory_throughput_points(cases)}
    assert set(points) == {"ddp", "tp", "pp"}
    # tp and pp each hold about half of mlp's parameters a rank, ddp all of them: less memory a device.
    assert points["tp"][0] < points["ddp"][0] and points["pp"][0] < points["ddp"][0]
    assert all(tput > 0 for _, tput in points.values())
    out = tmp_path / "report"
    r = subprocess.run([SCRIPT, str(results), "-o", str(out)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert (out / "memory_vs_throughput.png").read_bytes().startswith(PNG_MAGIC)


def test_a_case_on_a_mesh_is_labelled_with_its_mesh_beside_the_same_strategy_over_the_world(tmp_path):
    """pp over the world and pp on dp=2,pp=2 are two layouts: their labels tell them apart."""
    flat, mesh = tmp_path / "flat.json", tmp_path / "mesh.json"
    small_run(flat, "pp", world=4)
    small_run(mesh, "pp", world=4, extra=("--mesh", "dp=2,pp=2"))
    cases = report_cases.collect_cases([("flat", json.load(open(flat))), ("mesh", json.load(open(mesh)))])
    assert sorted(c.mesh for c in cases) == ["", "dp=2,pp=2"]
    labels = sorted(report_cases.label(c) for c in cases)
    assert labels == ["mlp/pp/world:4 (dp=2,pp=2) [mesh]", "mlp/pp/world:4 [flat]"], labels
