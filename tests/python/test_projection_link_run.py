"""projection/link_run.py and ddpbench-project --link-run: the inter-node link's efficiency range
widened to what a ddpbench run across nodes reached over it, and refused where the run cannot show it."""
import dataclasses
import json
import os
import socket
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT  # noqa: E402
sys.path.insert(0, ROOT)
from projection import link_run, network  # noqa: E402

EXE = os.path.join(BUILD, "ddpbench")
PROJECT = os.path.join(ROOT, "scripts", "ddpbench-project")
MIB, KIB = float(1 << 20), 1024.0
RATE = 125e6  # 1000 Mbit/s in bytes a second
ALPHA = 100e-6


def shaped_network(burst=256 * KIB):
    link = network.Link(RATE, ALPHA, "test", efficiency=0.95, efficiency_low=0.936, efficiency_high=0.956,
                        efficiency_source="stated", burst_bytes=burst)
    return network.Network(name="veth", devices_per_node=1, intra=link, inter=link, nics_per_node=1)


def entry(strategy, buckets, all_gather=None, world=2, status="ok"):
    """One repetition's bones: `buckets` as (bytes, seconds) of ddp's all-reduce or zero's
    reduce-scatter; `all_gather` as (bytes, seconds, buckets)."""
    key = "allreduce_ms" if strategy == "ddp" else "reduce_scatter_ms"
    comm = {"bucket_timeline": [{"bytes": b, "ready_ms": 1.0, key: s * 1e3} for b, s in buckets],
            "buckets": len(buckets)}
    if all_gather:
        comm.update(all_gather_bytes_per_step=all_gather[0], all_gather_ms=all_gather[1] * 1e3, buckets=all_gather[2])
    return {"run_type": "iteration", "ddpbench": {"strategy": strategy, "world_size": world, "status": status,
                                                  "comm": comm}}


def doc(*entries, env=None):
    env = {"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "1"} if env is None else env
    return {"context": {"ddpbench": {"env": env}}, "benchmarks": list(entries)}


def seconds_at(efficiency, bus_bytes, steps, burst=256 * KIB):
    """How long a collective of `bus_bytes` at the bus takes where the link reaches `efficiency`."""
    return (bus_bytes - burst) / (RATE * efficiency) + steps * ALPHA


def test_each_large_collective_gives_the_efficiency_it_reached_less_its_latency_and_token_bucket():
    net = shaped_network()
    ddp = entry("ddp", [(45e3, 5e-3), (10 * MIB, seconds_at(0.80, 10 * MIB, 2))])
    # zero's reduce-scatter at world 2 sends half the bucket; its all-gathers, one a bucket, half too.
    zero = entry("zero1", [(12 * MIB, seconds_at(0.85, 6 * MIB, 1))], all_gather=(12 * MIB, seconds_at(0.9, 6 * MIB, 1), 1))
    effs, kinds = link_run.measured_efficiencies(doc(ddp, zero), net.inter)
    # The 45 kB bucket is the latency's and the bucket's, not the bandwidth's: left out.
    assert sorted(effs) == [pytest.approx(0.80), pytest.approx(0.85), pytest.approx(0.90)]
    assert kinds == ["ddp's bucket all-reduce", "zero1's all-gathers", "zero1's bucket reduce-scatter"]
    widened = link_run.widen(net, doc(ddp, zero), "run.json")
    # The range holds what was measured; the point stays the stated one, and so does the top.
    assert (widened.inter.efficiency, widened.inter.efficiency_low, widened.inter.efficiency_high) == (
        0.95, pytest.approx(0.80), 0.956)
    assert widened.intra == widened.inter  # one link for both, as the network had it
    assert "run.json reached over the link, 80.0%-90.0%" in widened.inter.efficiency_source
    assert widened.inter.efficiency_source.startswith("stated; ")
    # A link measured faster than stated widens the top the same way, never narrows either end.
    fast = link_run.widen(net, doc(entry("ddp", [(10 * MIB, seconds_at(0.99, 10 * MIB, 2))])), "run.json")
    assert (fast.inter.efficiency_low, fast.inter.efficiency_high) == (0.936, pytest.approx(0.99))


def test_failed_repetitions_and_fsdp_and_one_rank_say_nothing_of_the_link():
    net = shaped_network()
    slow = [(10 * MIB, seconds_at(0.5, 10 * MIB, 2))]
    for e in (entry("ddp", slow, status="failed"), entry("fsdp", slow), entry("ddp", slow, world=1)):
        assert link_run.measured_efficiencies(doc(e), net.inter) == ([], [])
    # A collective that the token bucket could have sent in large part is not the link's rate.
    small = entry("ddp", [(1.5 * MIB, seconds_at(0.5, 1.5 * MIB, 2))])
    assert link_run.measured_efficiencies(doc(small), net.inter) == ([], [])


@pytest.mark.parametrize("env, nodes", [
    ({"WORLD_SIZE": "8", "LOCAL_WORLD_SIZE": "4"}, 2),
    ({"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}, 1),
    ({"SLURM_NTASKS": "16", "SLURM_NTASKS_PER_NODE": "8"}, 2),
    ({}, None),
    ({"WORLD_SIZE": "2"}, None),
    ({"WORLD_SIZE": "two", "LOCAL_WORLD_SIZE": "1"}, None),
])
def test_the_nodes_a_run_spanned_are_read_from_its_launchers_variables(env, nodes):
    assert link_run.nodes_of(doc(env=env)) == nodes


@pytest.mark.parametrize("d, words", [
    (doc(entry("ddp", [(10 * MIB, 0.1)]), env={}), "cannot be told to have run on more than one node"),
    (doc(entry("ddp", [(10 * MIB, 0.1)]), env={"WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2"}), "ran on one node"),
    (doc(entry("ddp", [(45e3, 0.005)])), "no ddp, zero1 or zero2 collective of at least 1 MiB"),
])
def test_a_run_that_cannot_show_the_link_is_refused_naming_the_flag(d, words):
    with pytest.raises(link_run.LinkRunError) as e:
        link_run.widen(shaped_network(), d, "run.json")
    assert str(e.value).startswith("--link-run run.json: ") and words in str(e.value)


def test_a_network_whose_nics_outrun_its_intra_node_link_is_refused():
    net = shaped_network()
    net = dataclasses.replace(net, intra=dataclasses.replace(net.intra, bandwidth=RATE / 2))
    with pytest.raises(link_run.LinkRunError, match="faster than its intra-node link"):
        link_run.widen(net, doc(entry("ddp", [(10 * MIB, 0.1)])), "run.json")


# ---- a real run across two "nodes": two ddpbench processes launched torchrun-style ------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def two_node_run(tmp_path_factory):
    """ddp and zero1 of mlp, one rank a "node" (LOCAL_WORLD_SIZE=1) over loopback; rank 0 writes the file."""
    path = tmp_path_factory.mktemp("linkrun") / "run.json"
    port = str(free_port())
    procs = []
    for rank in range(2):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        out = ["--json", str(path)] if rank == 0 else ["--no-json"]
        procs.append(subprocess.Popen([EXE, "--strategy", "ddp,zero1", "--workload", "mlp", "--device", "cpu",
                                       "--threads", "1", "--batch", "32", "--steps", "3", "--warmup", "1",
                                       "--repetitions", "2", "--parity-steps", "0"] + out,
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    return path


def test_the_command_widens_the_stated_link_by_a_real_run_across_nodes(two_node_run, tmp_path):
    # A link stated far faster than loopback: what the run reached is a small part of it, and the
    # band's slow edge must move out to it while the point stays.
    described = {"name": "stated", "devices_per_node": 1, "nics_per_node": 1,
                 "intra": {"bandwidth_GBps": 100.0, "alpha_us": 1.0,
                           "efficiency": {"value": 0.9, "low": 0.85, "high": 0.95, "source": "stated by hand"}}}
    net_file = tmp_path / "net.json"
    net_file.write_text(json.dumps(described))
    plain, widened = tmp_path / "plain.json", tmp_path / "widened.json"
    common = [two_node_run, "--network", net_file, "--world", "2,16", "--strategy", "ddp,zero1"]
    r = subprocess.run([PROJECT, *map(str, common), "--json", str(plain)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([PROJECT, *map(str, common), "--link-run", str(two_node_run), "--json", str(widened)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "reached over the link" in r.stdout
    run = json.load(open(two_node_run))
    effs, _ = link_run.measured_efficiencies(run, network.Link(100e9, 1e-6))
    assert effs and max(effs) < 0.85
    inter = json.load(open(widened))["network"]["inter"]["efficiency"]
    assert (inter["value"], inter["low"], inter["high"]) == (0.9, pytest.approx(min(effs)), 0.95)
    before = {(p["strategy"], p["world"]): p for p in json.load(open(plain))["projections"]}
    after = {(p["strategy"], p["world"]): p for p in json.load(open(widened))["projections"]}
    for key in before:
        assert after[key]["step_ms"] == pytest.approx(before[key]["step_ms"])
        assert after[key]["step_ms_band"][0] == pytest.approx(before[key]["step_ms_band"][0])
        assert after[key]["step_ms_band"][1] > before[key]["step_ms_band"][1]


def test_a_link_run_on_one_node_is_one_line_and_exit_2(tmp_path):
    one_node = tmp_path / "one.json"
    subprocess.run([EXE, "--strategy", "ddp", "--world-size", "2", "--workload", "mlp", "--device", "cpu",
                    "--threads", "1", "--batch", "32", "--steps", "2", "--warmup", "0", "--repetitions", "1",
                    "--parity-steps", "0", "--json", str(one_node)], check=True, stdout=subprocess.DEVNULL)
    for bad, words in ((one_node, "only a run across nodes measures the inter-node link"),
                       (tmp_path / "missing.json", "--link-run")):
        r = subprocess.run([PROJECT, str(one_node), "--link-run", str(bad)], capture_output=True, text=True)
        assert r.returncode == 2 and r.stdout == ""
        assert words in r.stderr and len(r.stderr.strip().splitlines()) == 1
