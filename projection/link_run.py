"""The inter-node link's efficiency as a ddpbench run across nodes measured it (--link-run RUN.json).

A stated efficiency (a preset's nccl-tests figure, a network file's, a shaped link's header
arithmetic) says what the link reaches at best. What Gloo's TCP rings reached over it in a real run
can be less, and varies from collective to collective: issue 48's shaped veth at 1000 Mbit/s gave
ddp's 11.6 MB all-reduce 88-96% of the rate and zero's 5.8 MB exchanges 85-93%, where the frames'
headers alone allow 93.6-95.6%. A band that holds only the stated range is narrower than the link.

Each large collective of the run (ddp's bucket all-reduces, zero1's and zero2's bucket
reduce-scatters and their all-gathers, every repetition apart) gives the bus bandwidth it reached:
its bytes at the bus (2 (W-1)/W of an all-reduce's, (W-1)/W of the others') less what the link's
token bucket could have sent ahead, over its time less the ring's latency steps. Against the
node's NICs' nominal rate, that is an efficiency. The link's range is widened to hold them all;
it is never narrowed (a stated range still stands) and the point stays what was stated, so a
projection moves only at its band's edges. "Large": the bytes cost at least eight times the
latency steps and the token bucket, so that neither decides the figure. fsdp's gathers are left
out: prefetched, they wait behind one another and behind compute, and their times are not the link's.

Uses reports.results (the file) and network (the links); the model never reads the run itself.
"""
import math
import os
from dataclasses import replace

from reports import results
from . import network

# A collective whose bytes cost less than this many times its latency steps and token bucket says
# more of those than of the link's bandwidth.
LARGE = 8.0
MIB = float(1 << 20)


class LinkRunError(network.NetworkError):
    """A --link-run file that cannot show the inter-node link."""


def _env_int(env, name):
    try:
        v = int(env.get(name, ""))
    except ValueError:
        return None
    return v if v > 0 else None


def nodes_of(doc):
    """How many nodes the run's ranks were on, from the launcher's variables the file kept: torchrun's
    WORLD_SIZE over LOCAL_WORLD_SIZE, Slurm's SLURM_NTASKS over SLURM_NTASKS_PER_NODE. None where the
    file cannot tell (ddpbench's own --world-size launch is one node)."""
    env = doc["context"]["ddpbench"].get("env") or {}
    for world, local in (("WORLD_SIZE", "LOCAL_WORLD_SIZE"), ("SLURM_NTASKS", "SLURM_NTASKS_PER_NODE")):
        w, l = _env_int(env, world), _env_int(env, local)
        if w and l:
            return math.ceil(w / l)
    return None


def _collectives(entry):
    """(kind, bytes at the bus, latency steps, seconds) of each collective a repetition recorded."""
    f = entry["ddpbench"]
    world = f.get("world_size") or 1
    comm = f.get("comm") or {}
    out = []
    if f.get("strategy") not in ("ddp", "zero1", "zero2") or world < 2:
        return out
    for b in comm.get("bucket_timeline") or []:
        if "allreduce_ms" in b and f["strategy"] == "ddp":
            out.append(("ddp's bucket all-reduce", 2 * (world - 1) / world * b["bytes"], 2 * (world - 1),
                        b["allreduce_ms"] * 1e-3))
        elif "reduce_scatter_ms" in b:
            out.append((f"{f['strategy']}'s bucket reduce-scatter", (world - 1) / world * b["bytes"], world - 1,
                        b["reduce_scatter_ms"] * 1e-3))
    gathered, gather_ms = comm.get("all_gather_bytes_per_step") or 0, comm.get("all_gather_ms") or 0
    if f["strategy"] in ("zero1", "zero2") and gathered > 0 and gather_ms > 0:
        # One all-gather a bucket, one after another after the optimizer.
        out.append((f"{f['strategy']}'s all-gathers", (world - 1) / world * gathered,
                    (world - 1) * max(1, comm.get("buckets") or 1), gather_ms * 1e-3))
    return out


def measured_efficiencies(doc, link, nics_per_node=1):
    """(efficiencies, kinds) of the run's large collectives against `link`'s nominal rate (times the
    node's NICs: one ring per NIC)."""
    effs, kinds = [], set()
    rate = link.bandwidth * nics_per_node
    for entry in doc["benchmarks"]:
        if entry.get("run_type") != "iteration" or (entry.get("ddpbench") or {}).get("status") != "ok":
            continue
        for kind, bus_bytes, steps, seconds in _collectives(entry):
            latency = steps * link.alpha
            sent = bus_bytes - link.burst_bytes
            if sent < MIB or seconds <= latency * LARGE or bus_bytes < LARGE * link.burst_bytes:
                continue
            effs.append(sent / (seconds - latency) / rate)
            kinds.add(kind)
    return effs, sorted(kinds)


def widen(net, doc, path):
    """`net` with its inter-node link's efficiency range widened to what the run at `path` measured
    over it (the intra-node link too where the network is one link for both, as a fit is)."""
    where = f"--link-run {path}"
    nodes = nodes_of(doc)
    if nodes is None or nodes < 2:
        said = "ran on one node" if nodes == 1 else "cannot be told to have run on more than one node"
        raise LinkRunError(f"{where}: its ranks {said} (torchrun's WORLD_SIZE and LOCAL_WORLD_SIZE, or Slurm's "
                           f"SLURM_NTASKS and SLURM_NTASKS_PER_NODE): only a run across nodes measures the "
                           f"inter-node link")
    if net.intra != net.inter and net.intra.bandwidth < net.nics_per_node * net.inter.bandwidth:
        raise LinkRunError(f"{where}: the network's NICs together are faster than its intra-node link, so a "
                           f"collective across nodes does not show the inter-node link's efficiency")
    effs, kinds = measured_efficiencies(doc, net.inter, net.nics_per_node)
    if not effs:
        raise LinkRunError(f"{where}: no ddp, zero1 or zero2 collective of at least 1 MiB that the link's "
                           f"bandwidth decides (ddpbench --strategy ddp across two nodes records one)")
    link = net.inter
    low, high = min([link.efficiency_low] + effs), max([link.efficiency_high] + effs)
    source = (f"{link.efficiency_source}; the range widened to what {len(effs)} collectives of "
              f"{os.path.basename(path)} reached over the link, {min(effs):.1%}-{max(effs):.1%} of its nominal "
              f"rate ({', '.join(kinds)}; its alpha and token bucket taken off)")
    inter = replace(link, efficiency_low=low, efficiency_high=high, efficiency_source=source)
    intra = inter if net.intra == net.inter else net.intra
    return replace(net, intra=intra, inter=inter, sources=net.sources + [f"link measured: {where}"])


def load_and_widen(net, path):
    """widen(), the file read by the results rules; a ddpbench-micro file is refused (one host)."""
    try:
        doc = results.load(path)
    except results.ResultsError as e:
        raise LinkRunError(f"--link-run: {e}") from e
    if results.is_micro(doc):
        raise LinkRunError(f"--link-run {path}: a ddpbench-micro file (one host over loopback); a ddpbench run "
                           f"across nodes measures the link")
    return widen(net, doc, path)
