"""ddpbench-project: the cost model, the network descriptions and fits, the replay of a real run's
bucket timeline, and the command's outputs and refusals."""
import json
import math
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from projection import cli, collectives, model, network  # noqa: E402
from reports import results  # noqa: E402

EXE = os.path.join(BUILD, "ddpbench")
PROJECT = os.path.join(ROOT, "scripts", "ddpbench-project")
MICRO = os.path.join(BUILD, "benchmarks", "ddpbench-micro")

GBPS, US = 1e9, 1e-6


def flat_network(devices_per_node=8, intra_gbps=100.0, intra_us=2.0, inter_gbps=10.0, inter_us=10.0, nics=1,
                 base_us=0.0, **kw):
    return network.Network(name="test", devices_per_node=devices_per_node,
                           intra=network.Link(intra_gbps * GBPS, intra_us * US),
                           inter=network.Link(inter_gbps * GBPS, inter_us * US), nics_per_node=nics,
                           base_latency=base_us * US, **kw)


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A real ddpbench run with a ddp case (its bucket timeline) and a single case."""
    path = tmp_path_factory.mktemp("project") / "run.json"
    subprocess.run([EXE, "--strategy", "single,ddp", "--world-size", "2", "--workload", "mlp", "--device", "cpu",
                    "--threads", "1", "--batch", "32", "--steps", "3", "--warmup", "1", "--repetitions", "2",
                    "--parity-steps", "0", "--bucket-mb", "4", "--json", str(path)],
                   check=True, stdout=subprocess.DEVNULL)
    return path


# ---- collectives ---------------------------------------------------------------------------

def test_one_rank_costs_nothing():
    assert collectives.allreduce(flat_network(), 1 << 20, 1) == collectives.Cost(0.0, "none")


def test_ring_inside_a_node_is_the_textbook_formula():
    net = flat_network(base_us=5)
    s, w = 64e6, 4
    expected = 5 * US + 2 * (w - 1) * 2 * US + 2 * (w - 1) / w * s / (100 * GBPS)
    cost = collectives.allreduce(net, s, w)
    assert cost.algorithm == "ring"
    assert cost.seconds == pytest.approx(expected, rel=1e-12)


def test_across_nodes_the_nics_together_bound_the_bus_bandwidth():
    # 8 devices a node at 100 GB/s, 4 NICs of 10 GB/s: 40 GB/s leaves the node.
    net = flat_network(nics=4)
    assert collectives.bus_bandwidth(net, 8) == 100 * GBPS
    assert collectives.bus_bandwidth(net, 16) == 40 * GBPS
    # Enough NICs: the intra-node link is the bound again.
    assert collectives.bus_bandwidth(flat_network(nics=16), 16) == 100 * GBPS


def test_small_all_reduces_over_many_nodes_take_the_tree_and_large_ones_the_ring():
    net = flat_network()
    small = collectives.allreduce(net, 4096, 512)
    large = collectives.allreduce(net, 1e9, 16)
    assert small.algorithm == "tree"
    assert large.algorithm == "ring"
    # The tree's latency grows with log2 of the nodes; the ring's with the ranks.
    nodes = 64
    tree_latency = 2 * (7 * 2 * US + math.log2(nodes) * 10 * US)
    assert small.seconds == pytest.approx(tree_latency + 2 * 4096 / (10 * GBPS), rel=1e-9)


# ---- networks ------------------------------------------------------------------------------

def test_presets_carry_their_figures_and_sources():
    net = network.load("nvlink4+ndr400")
    assert net.devices_per_node == 8 and net.nics_per_node == 8
    assert net.intra.bandwidth == 450 * GBPS and net.inter.bandwidth == 50 * GBPS
    text = "\n".join(net.describe())
    assert "datasheet" in text and "NCCL" in text
    assert network.load("pcie5+eth100", devices_per_node=4).devices_per_node == 4


@pytest.mark.parametrize("spec, words", [
    ("nvlink9+ndr400", "no intra-node preset"),
    ("nvlink4+ndr800", "no inter-node preset"),
    ("fast", "neither a file nor INTRA"),
])
def test_an_unknown_network_is_named(spec, words):
    with pytest.raises(network.NetworkError, match=words):
        network.load(spec)


def test_a_network_file_is_read_and_checked(tmp_path):
    path = tmp_path / "net.json"
    desc = {"name": "lab", "devices_per_node": 4, "nics_per_node": 2,
            "intra": {"bandwidth_GBps": 20, "alpha_us": 3}, "inter": {"bandwidth_GBps": 5, "alpha_us": 9}}
    path.write_text(json.dumps(desc))
    net = network.load(str(path))
    assert (net.devices_per_node, net.nics_per_node, net.inter.alpha) == (4, 2, pytest.approx(9 * US))
    desc["inter"]["bandwidth_GBps"] = -1
    path.write_text(json.dumps(desc))
    with pytest.raises(network.NetworkError, match="bandwidth_GBps should be above 0"):
        network.load(str(path))
    # What to_json writes reads back as the same network.
    path.write_text(json.dumps(flat_network(compute_slots_per_node=2).to_json()))
    again = network.load(str(path))
    assert again.compute_slots == 2 and again.inter == network.Link(10 * GBPS, pytest.approx(10 * US), "")


def test_alpha_and_bandwidth_are_recovered_from_nccl_tests_output(tmp_path):
    # all_reduce_perf's layout, its times made from a known alpha and bandwidth over 8 ranks on 2 hosts.
    alpha, bw, n = 6e-6, 40e9, 8
    lines = [f"#  Rank  {r} Group  0 Pid  {100 + r} on  node{r // 4} device  {r % 4} [0x1b] NVIDIA H100" for r in range(n)]
    lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw"
                 "   busbw #wrong")
    for size in (1 << 20, 1 << 24, 1 << 28):
        t_us = (2 * (n - 1) * alpha + 2 * (n - 1) / n * size / bw) * 1e6
        lines.append(f"  {size:>12} {size // 4:>12}     float     sum      -1  {t_us:8.2f}  0.00  0.00      0  "
                     f"{t_us:8.2f}  0.00  0.00      0")
    path = tmp_path / "nccl.txt"
    path.write_text("\n".join(lines) + "\n")
    net = network.load(str(path))
    assert net.devices_per_node == 4
    assert net.intra.bandwidth == pytest.approx(bw, rel=1e-3)
    assert net.intra.alpha == pytest.approx(alpha, rel=1e-2)


def test_a_fit_to_ddpbench_micro_is_close_to_its_own_measurements(tmp_path):
    path = tmp_path / "micro.json"
    subprocess.run([MICRO, "--benchmark_filter=BM_GlooAllreduce/(65536|1048576|4194304)/",
                    "--benchmark_min_time=0.05", f"--benchmark_out={path}", "--benchmark_out_format=json"],
                   check=True, stdout=subprocess.DEVNULL)
    net = network.load(str(path))
    assert net.transport_on_compute_cores  # loopback Gloo: the CPU copies every byte
    doc = json.load(open(path))
    measured = {int(b["name"].split("/")[1]): b["real_time"] * 1e-9 for b in doc["benchmarks"]}
    # The fit's own prediction for its largest point, through the model's two-rank ring.
    largest = max(measured)
    predicted = collectives.allreduce(net, largest, 2).seconds
    assert predicted == pytest.approx(measured[largest], rel=0.35)


# ---- the model ------------------------------------------------------------------------------

def case(strategy="ddp", world=1, batch=64, buckets=None, gradient_bytes=100e6, **phases_ms):
    phases = {"data": 1.0, "forward": 10.0, "backward": 20.0, "optimizer": 5.0, "residual": 0.0}
    phases.update(phases_ms)
    return model.MeasuredCase(name=f"w/{strategy}/world:{world}", workload="w", strategy=strategy, world=world,
                              global_batch=batch, phases={k: v / 1e3 for k, v in phases.items()},
                              gradient_bytes=gradient_bytes, buckets=buckets, step_s=sum(phases.values()) / 1e3)


def test_ddp_replays_the_measured_timeline_and_exposes_only_what_backward_does_not_hide():
    net = flat_network(intra_gbps=10, intra_us=0)  # 2 ranks: a ring moves S bytes at 10 GB/s
    # Bucket 0 (10 MB) ready at 5 ms, bucket 1 (90 MB) at the end of backward (20 ms).
    c = case(buckets=[model.Bucket(10e6, 5e-3), model.Bucket(90e6, 20e-3)])
    p = model.Projector(net, "weak").ddp(c, 2)
    # Bucket 0: 5 -> 6 ms. Bucket 1: 20 -> 29 ms: 9 ms exposed.
    assert p.comm_ms == pytest.approx(10.0)
    assert p.exposed_comm_ms == pytest.approx(9.0)
    assert p.step_ms == pytest.approx(1 + 10 + 20 + 9 + 5)
    assert p.samples_per_second == pytest.approx(128 / (45e-3))  # weak: 64 a rank, 2 ranks


def test_strong_scaling_splits_the_batch_and_keeps_the_optimizer():
    c = case(batch=64)
    p = model.Projector(flat_network(), "strong").ddp(c, 4)
    assert p.step_ms == pytest.approx((1 + 10 + 20) / 4 + 5 + p.exposed_comm_ms)
    assert p.samples_per_second == pytest.approx(64 / (p.step_ms / 1e3))
    assert any("assumed" in a for a in p.assumptions)  # no timeline in the case: default buckets, said so


def test_ranks_beyond_the_compute_slots_share_them():
    net = flat_network(devices_per_node=4, compute_slots_per_node=2, transport_on_compute_cores=True)
    c = case(buckets=[model.Bucket(1e6, 20e-3)])
    two, four = model.Projector(net, "weak").ddp(c, 2), model.Projector(net, "weak").ddp(c, 4)
    # At 4 ranks on 2 slots compute and (loopback) communication take twice as long.
    assert four.step_ms - four.exposed_comm_ms == pytest.approx(2 * (two.step_ms - two.exposed_comm_ms))


def test_dataparallel_and_hogwild_stop_at_the_node():
    p = model.Projector(flat_network(devices_per_node=8), "weak")
    assert p.dp(case("single"), 8).status == "projected"
    assert p.dp(case("single"), 16).status == "refused"
    assert "cannot span nodes" in p.dp(case("single"), 16).reason
    assert p.hogwild(case("single"), 16).status == "refused"


def test_a_real_runs_timeline_is_replayed(real_run):
    doc = results.load(str(real_run))
    cases = model.measured_cases(doc)
    ddp = model.pick_base(cases, "mlp", "ddp")
    assert ddp.strategy == "ddp" and ddp.world == 2
    assert len(ddp.buckets) >= 2  # --bucket-mb 4 over mlp's 11.6 MB
    assert sum(b.nbytes for b in ddp.buckets) >= 2913290 * 4
    projections = model.project_file(doc, network.load("nvlink4+ndr400"), [2, 16, 512], "weak")
    by = {(p.strategy, p.world): p for p in projections}
    assert by[("ddp", 16)].nodes == 2 and by[("ddp", 512)].nodes == 64
    assert by[("ddp", 16)].from_case == "mlp/ddp/world:2"
    assert by[("hogwild", 2)].from_case == "mlp/single/world:1"
    assert by[("dp", 512)].status == "refused"
    for p in projections:
        if p.status == "projected":
            assert p.step_ms > 0 and 0 < p.scaling_efficiency <= 1.0 + 1e-9


# ---- the command ------------------------------------------------------------------------------

def run_project(*args):
    return subprocess.run([PROJECT, *map(str, args)], capture_output=True, text=True)


def test_the_command_prints_the_numbers_with_their_assumptions_and_writes_json_and_a_chart(real_run, tmp_path):
    out_json, out_png = tmp_path / "p.json", tmp_path / "p.png"
    r = run_project(real_run, "--world", "8,64", "--json", out_json, "--chart", out_png)
    assert r.returncode == 0, r.stderr
    assert "mlp/ddp" in r.stdout and "assumptions:" in r.stdout and "weak" in r.stdout
    assert "datasheet" in r.stdout
    doc = json.load(open(out_json))
    assert doc["ddpbench_projection"] == cli.SCHEMA_VERSION
    assert {(p["strategy"], p["world"]) for p in doc["projections"]} >= {("ddp", 8), ("ddp", 64), ("dp", 64)}
    assert open(out_png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, words", [
    (["--world", "0"], "--world"),
    (["--world", "8,x"], "--world"),
    (["--gpus-per-node", "0"], "--gpus-per-node"),
    (["--network", "nvlink4+carrier-pigeon"], "no inter-node preset"),
    (["--strategy", "ddp,zero"], "--strategy"),
    (["--json", "/nonexistent-dir/p.json"], "mkdir -p"),
])
def test_bad_input_is_one_line_and_exit_2(real_run, args, words):
    r = run_project(real_run, *args)
    assert r.returncode == 2
    assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert r.stdout == ""


def test_an_output_that_names_the_input_is_refused(real_run):
    before = open(real_run).read()
    r = run_project(real_run, "--json", real_run)
    assert r.returncode == 2 and "input" in r.stderr
    assert open(real_run).read() == before


def test_a_missing_or_wrong_results_file_is_refused(tmp_path):
    r = run_project(tmp_path / "none.json")
    assert r.returncode == 2 and "cannot read" in r.stderr
    micro = {"context": {"ddpbench_micro": "0.1.0"}, "benchmarks": []}
    (tmp_path / "micro.json").write_text(json.dumps(micro))
    r = run_project(tmp_path / "micro.json")
    assert r.returncode == 2 and "--network" in r.stderr


def test_the_report_includes_the_projection(real_run, tmp_path):
    out_json = tmp_path / "p.json"
    assert run_project(real_run, "--world", "2,8,64", "--json", out_json).returncode == 0
    r = subprocess.run([os.path.join(ROOT, "scripts", "ddpbench-report"), str(real_run), str(out_json), "-o",
                        str(tmp_path / "report")], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert os.path.exists(tmp_path / "report" / "projection.png")
    page = open(tmp_path / "report" / "index.html").read()
    assert "Projected scaling efficiency: p.json" in page and "predicted, not measured" in page
    assert "nvlink4+ndr400" in page


@pytest.mark.parametrize("damage", [
    lambda d: d["projections"][0].update(step_ms="fast"),
    lambda d: d["projections"][0].update(world=None),
    lambda d: d["projections"].append(7),
    lambda d: d.update(ddpbench_projection=99),
])
def test_the_report_refuses_a_damaged_projection_in_one_line(real_run, tmp_path, damage):
    out_json = tmp_path / "p.json"
    assert run_project(real_run, "--world", "8", "--json", out_json).returncode == 0
    doc = json.load(open(out_json))
    damage(doc)
    out_json.write_text(json.dumps(doc))
    r = subprocess.run([os.path.join(ROOT, "scripts", "ddpbench-report"), str(real_run), str(out_json), "-o",
                        str(tmp_path / "report")], capture_output=True, text=True)
    assert r.returncode == 2, r.stderr
    assert "p.json" in r.stderr and len(r.stderr.strip().splitlines()) == 1
