#!/usr/bin/python3
"""ddpbench-project checked against measurement on this machine: predicted against measured step time.

What is predicted, and from what:
- world N = 2, 3, 4 of ddp, dp, zero1, zero2 and fsdp on CPU virtual devices (one host, Gloo over
  loopback);
- two "nodes" in network namespaces joined by a veth pair whose both ends are shaped with tc's
  token bucket (tbf) to a bandwidth of our choosing, one rank of ddp, zero1, zero2 and fsdp in each
  (world 2, torchrun-style);
each from world-1 runs, a micro-benchmark and one calibration run only:
- the network: alpha and bandwidth fitted to ddpbench-micro's Gloo all-reduce times (loopback), and
  for the namespaces the shaped rate as the link's bandwidth (what a datasheet would say), its
  efficiency range widened to what the calibration runs over the link reached (ddp's and zero1's
  large collectives), as ddpbench-project --link-run does;
- compute: a world-1 run at the per-rank batch (global batch / N), projected with weak scaling to
  world N. This VM has 2 cores and a rank uses one (--threads 1): at world 3 and 4 the ranks
  outnumber the cores, and the network description says so (compute_slots_per_node: the cores;
  Gloo over loopback is copied by those same cores, transport_on_compute_cores), so compute and
  communication are slowed in proportion. A GPU node has no such sharing; this is the part of the
  model that only a CPU host exercises;
- compute slowed by communication (projection/slowdown.py): fitted from a calibration run of ddp at
  world 2 (a run of its own, not the one a case is measured by; over a namespace link, zero1 runs in
  it too) against the world-1 single run.
Each case is predicted twice, by the model as it was before issue 48 (no slow-down; the links are
fitted, so their efficiency is 1.0 either way) and as it is, with its band; the summary gives signed
errors for both and how many measured times fell inside the band.

    /usr/bin/python3 benchmarks/projection_validation.py OUT_DIR [--workloads mlp,transformer]
        [--worlds 2,3,4] [--netns-mbit 1000,400] [--netns-burst 256kb] [--steps 30] [--repetitions 3]
        [--rounds 3]
    /usr/bin/python3 benchmarks/projection_validation.py OUT_DIR --repredict FROM_DIR

The shaped link's token bucket (--netns-burst, tc's size syntax) is a property of the test link
that no NIC has: after an idle gap a collective sends its first burst at the veth's own speed, and
a transformer's small collectives after compute gaps ran up to a fifth faster than the rate with
256 KiB. A small bucket does not keep the rate: with 32 KiB, Gloo's all-reduce got about 70% of
1000 Mbit/s and 93% of 400 (docs/projection.md). So the default stays 256kb, and the namespace
link the model is given states the bucket (burst_bytes), as a description of a shaped link would.

--repredict FROM_DIR measures nothing: it predicts again, with the model as it is now, from the
files an earlier run kept in FROM_DIR (its settings, micro.json, the base, calibration and measured
runs), and writes OUT_DIR/validation.json and .md. What it shows is how a change to the model moves
the errors on measurements that are already in; a fresh run is what checks it.

Writes OUT_DIR/validation.json and OUT_DIR/validation.md (every case, and the median absolute error),
and keeps every results file it read. The namespaces need root and tc's tbf; without them that part is
skipped and the table says so.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import replace

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from projection import link_run, model, network, slowdown  # noqa: E402
from reports import results, stats  # noqa: E402


STRATEGIES = ("ddp", "dp", "zero1", "zero2", "fsdp")
NETNS_STRATEGIES = ("ddp", "zero1", "zero2", "fsdp")  # dp is one process: it has no two-node form
# What runs over a namespace link before the measured run: ddp (the compute slow-down is fitted from
# it) and zero1 (its exchanges reach less of the link than ddp's all-reduce; with ddp's, they are
# what --link-run widens the link's efficiency range by).
NETNS_CALIBRATION = ("ddp", "zero1")
# What a user would state for a token-bucket-shaped Ethernet link, from the frame, not fitted: tbf
# charges every byte of every frame, and for a GSO packet the kernel adds each segment's headers as
# if it were already cut into frames (net/core/dev.c, qdisc_pkt_len_init). So TCP over IPv4 with
# timestamps carries 1448 bytes of each 1514 tbf counts (0.956) at best, GSO or not; a ring sends
# both ways at once, and the other direction's ACKs share the bucket: one 66-byte ACK per two
# segments gives 0.936 (1448 of 1547).
SHAPED_VETH_EFFICIENCY = dict(efficiency=0.95, efficiency_low=0.936, efficiency_high=0.956,
                              efficiency_source="TCP/IPv4 payload per byte tbf counts: 1448 of each 1514-byte "
                                                "frame (0.956; the kernel counts a GSO packet's headers per "
                                                "segment), down to 0.936 with an ACK per two segments the "
                                                "other way")


def tc_size_bytes(text):
    """tc's size syntax (tc(8): b, k or kb, m or mb, g or gb in bytes of 1024; kbit, mbit, gbit in
    bits), as bytes: what --netns-burst gives tbf, for the link the model is told of."""
    units = {"": 1, "b": 1, "k": 1024, "kb": 1024, "m": 1 << 20, "mb": 1 << 20, "g": 1 << 30, "gb": 1 << 30,
             "bit": 1 / 8, "kbit": 1024 / 8, "mbit": (1 << 20) / 8, "gbit": (1 << 30) / 8}
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([a-z]*)", text.strip().lower())
    if not m or m.group(2) not in units:
        raise SystemExit(f"projection_validation: --netns-burst {text!r} is not a size tc reads (e.g. 256kb)")
    return float(m.group(1)) * units[m.group(2)]


def run(cmd, **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    if r.returncode != 0:
        raise SystemExit(f"projection_validation: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r


def resize_parser(doc, worlds):
    """The options of the scripts that measure a strategy at one size and project it to others:
    OUT, --build, --workload, --from-world, --worlds (default `worlds`), --steps, --repetitions,
    --rounds."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--build", default=os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"))
    p.add_argument("--workload", default="mlp")
    p.add_argument("--from-world", type=int, default=2)
    p.add_argument("--worlds", default=worlds)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3)
    return p


def loopback_network(build, out, devices_per_node):
    """This host's loopback as ddpbench-project describes a network: alpha and bandwidth fitted to
    ddpbench-micro's Gloo all-reduce times (kept as OUT/micro.json), `devices_per_node` a node, this
    machine's cores its compute slots (--threads 1 a rank). For the scripts that project one
    strategy to other sizes (pp_, tp_projection_validation.py)."""
    micro = os.path.join(out, "micro.json")
    run([os.path.join(build, "benchmarks", "ddpbench-micro"), "--benchmark_filter=GlooAllreduce",
         f"--benchmark_out={micro}", "--benchmark_out_format=json", "--benchmark_min_time=0.2"])
    return replace(network.load(micro), devices_per_node=devices_per_node,
                   compute_slots_per_node=len(os.sched_getaffinity(0)))


def write_validation(args, loopback, rows, header, row_cells, what):
    """OUT/validation.json (the settings, the network, `rows`, a summary of their errors) and
    OUT/validation.md (the table: `header`'s columns, `row_cells(row)` a row's, then a line saying
    `what` and the summary), printed as well. Each row has "error" and "round_errors"."""
    errors = [abs(r["error"]) for r in rows]
    doc = {"settings": {k: v for k, v in vars(args).items() if k != "out"}, "network": loopback.to_json(),
           "rows": rows, "summary": {"cases": len(rows), "median_abs_error": stats.median(errors),
                                     "max_abs_error": max(errors),
                                     "under_predicted": sum(1 for r in rows if r["error"] < 0)}}
    with open(os.path.join(args.out, "validation.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row_cells(r)) + " |" for r in rows]
    lines += ["", f"{what}, {len(rows)} cases: median absolute error {doc['summary']['median_abs_error'] * 100:.1f}%, "
              f"largest {doc['summary']['max_abs_error'] * 100:.1f}%, {doc['summary']['under_predicted']} predicted low."]
    with open(os.path.join(args.out, "validation.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def by_round(errors):
    return ", ".join(f"{e * 100:+.0f}%" for e in errors)


def median_case(path, strategy):
    doc = results.load(path)
    for b in doc["benchmarks"]:
        if b.get("aggregate_name") == "median" and b["ddpbench"]["strategy"] == strategy:
            if b["ddpbench"]["status"] != "ok":
                raise SystemExit(f"projection_validation: {path}: {strategy} is {b['ddpbench']['status']}: "
                                 f"{b['ddpbench'].get('reason')}")
            return doc, b
    raise SystemExit(f"projection_validation: {path}: no {strategy} case")


class Validation:
    def __init__(self, args):
        self.args = args
        self.out = args.out
        # Where the runs' files are: written here, or (--repredict) read from an earlier run's folder.
        self.files = args.repredict or args.out
        self.exe = os.path.join(args.build, "ddpbench")
        self.micro = os.path.join(args.build, "benchmarks", "ddpbench-micro")
        self.samples = {}
        self.skipped = []
        self.children = []  # rank processes in flight, killed if this script is stopped
        self.cores = len(os.sched_getaffinity(0))  # --threads 1 a rank: a core is a compute slot

    def common(self, workload):
        return ["--workload", workload, "--device", "cpu", "--threads", "1", "--steps", str(self.args.steps),
                "--repetitions", str(self.args.repetitions), "--warmup", "5", "--parity-steps", "0"]

    def produce(self, cmd, path):
        """Run `cmd`, which writes `path`; replaying an earlier run, the file must be there already."""
        if not self.args.repredict:
            run(cmd)
        elif not os.path.isfile(path):
            raise SystemExit(f"projection_validation: --repredict {self.files}: lacks {os.path.basename(path)}")

    def fit_network(self):
        path = os.path.join(self.files, "micro.json")
        self.produce([self.micro, "--benchmark_filter=GlooAllreduce|ReplicateCopy", f"--benchmark_out={path}",
                      "--benchmark_out_format=json", "--benchmark_min_time=0.2"], path)
        self.loopback = network.load(path)
        with open(os.path.join(self.out, "loopback-network.json"), "w") as f:
            json.dump(self.loopback.to_json(), f, indent=1)
        return self.loopback

    def global_batch(self, workload):
        path = os.path.join(self.files, f"{workload}-batch-probe.json")
        self.produce([self.exe, "--strategy", "single", "--repetitions", "1", "--steps", "1", "--warmup", "0",
                      "--parity-steps", "0", "--workload", workload, "--device", "cpu", "--json", path], path)
        _, b = median_case(path, "single")
        return int(b["ddpbench"]["global_batch"])

    def base(self, workload, n, per_rank_batch, round_):
        """A world-1 run of single and every projected strategy at the per-rank batch, alone on the
        machine (pinned to one core, as ddpbench pins itself), and a calibration run of ddp at world 2
        at the same per-rank batch: what the compute slow-down is fitted from."""
        path = os.path.join(self.files, f"{workload}-base-batch{per_rank_batch}-round{round_}.json")
        self.produce([self.exe, "--strategy", "single," + ",".join(STRATEGIES), "--world-size", "1", "--batch",
                      str(per_rank_batch), "--json", path] + self.common(workload), path)
        calibration = os.path.join(self.files, f"{workload}-calibration-batch{per_rank_batch}-round{round_}.json")
        self.produce([self.exe, "--strategy", "ddp", "--world-size", "2", "--batch", str(2 * per_rank_batch),
                      "--json", calibration] + self.common(workload), calibration)
        return path, calibration

    def predict(self, base, strategy, world, net):
        """(the model before issue 48, the model now) for `strategy` at `world` on `net`."""
        base_path, calibration_path = base
        doc = results.load(base_path)
        cases = [c for c in model.measured_cases(doc) if c.strategy == strategy]
        fit_from = dict(doc, benchmarks=doc["benchmarks"] + results.load(calibration_path)["benchmarks"])
        fitted = slowdown.fit(fit_from, cases[0].workload, target_on_gpus=False)
        # Before issue 48 a link was its nominal bandwidth: no efficiency, no token bucket.
        nominal = replace(net, intra=replace(net.intra, efficiency=1.0, burst_bytes=0.0),
                          inter=replace(net.inter, efficiency=1.0, burst_bytes=0.0))
        before = model.Projector(nominal, "weak").project(cases[0], strategy, world)
        return before, model.Projector(net, "weak", fitted).project(cases[0], strategy, world)

    def record(self, setting, workload, strategy, world, predictions, measured_path):
        """One round's prediction and measurement of a case; write() takes the medians over rounds."""
        before, predicted = predictions
        _, b = median_case(measured_path, strategy)
        key = (setting, workload, strategy, world)
        sample = self.samples.setdefault(key, {"predicted_ms": [], "measured_ms": [], "predicted_exposed_comm_ms": [],
                                               "measured_exposed_comm_ms": [], "files": [], "before_ms": [],
                                               "band_ms": [], "slowdown": []})
        sample["predicted_ms"].append(predicted.step_ms)
        sample["before_ms"].append(before.step_ms)
        sample["band_ms"].append(predicted.step_ms_band)
        sample["slowdown"].append(predicted.compute_slowdown["factor"] if predicted.compute_slowdown else None)
        sample["measured_ms"].append(b["real_time"])
        if predicted.exposed_comm_ms is not None:
            sample["predicted_exposed_comm_ms"].append(predicted.exposed_comm_ms)
        # ddp's comm_exposed; the sharded strategies' reduce_scatter_exposed and all_gather_exposed.
        exposed = [ms for name, ms in b["ddpbench"]["phases_ms"].items() if name.endswith("_exposed")]
        if exposed:
            sample["measured_exposed_comm_ms"].append(sum(exposed))
        sample["files"].append(os.path.basename(measured_path))
        print(f"{setting:<28} {workload}/{strategy} world {world}: predicted {predicted.step_ms:8.2f} ms "
              f"(before {before.step_ms:8.2f}), measured {b['real_time']:8.2f} ms, "
              f"error {predicted.step_ms / b['real_time'] * 100 - 100:+6.1f}% "
              f"(before {before.step_ms / b['real_time'] * 100 - 100:+6.1f}%)", flush=True)

    def loopback_cases(self, workload, batch, round_):
        for n in self.args.worlds:
            per_rank = math.ceil(batch / n)
            base = self.base(workload, n, per_rank, round_)
            measured = os.path.join(self.files, f"{workload}-measured-n{n}-round{round_}.json")
            self.produce([self.exe, "--strategy", ",".join(STRATEGIES), "--world-size", str(n), "--batch",
                          str(batch), "--json", measured] + self.common(workload), measured)
            net = replace(self.loopback, devices_per_node=max(self.args.worlds), compute_slots_per_node=self.cores)
            for strategy in STRATEGIES:
                self.record("one host, loopback", workload, strategy, n, self.predict(base, strategy, n, net),
                            measured)
            if n == 2:
                self.base_for_two = base

    # ---- two namespaces, a shaped veth ------------------------------------------------------
    def netns_available(self):
        if os.geteuid() != 0:
            return "needs root to make network namespaces"
        if not shutil.which("ip") or not shutil.which("tc"):
            return "needs ip(8) and tc(8) (iproute2)"
        return None

    def shaped_network(self, mbit):
        """The namespace link as the model is told of it: tbf's rate, bucket and efficiency, stated."""
        link = network.Link(mbit * 1e6 / 8, self.loopback.intra.alpha,
                            f"tc tbf at {mbit} Mbit/s, burst {self.args.netns_burst}, on both ends of the veth; "
                            f"alpha from the loopback fit",
                            burst_bytes=tc_size_bytes(self.args.netns_burst), **SHAPED_VETH_EFFICIENCY)
        return network.Network(name=f"veth-{mbit}mbit", devices_per_node=1, intra=link, inter=link,
                               nics_per_node=1, sources=[link.source])

    def measured_link(self, mbit, workload, round_):
        """The namespace link with its efficiency range widened, as ddpbench-project --link-run does, by
        what the calibration runs over it this round measured so far: this workload's and those of the
        workloads before it (a transformer's collectives are too small to show the link's bandwidth,
        mlp's are not). Where none shows it, the link as stated."""
        net = self.shaped_network(mbit)
        workloads = self.args.workloads.split(",")
        runs = [os.path.join(self.files, f"{w}-calibration-netns-{mbit}mbit-round{round_}.json")
                for w in workloads[:workloads.index(workload) + 1]]
        docs = [results.load(r) for r in runs if os.path.isfile(r)]
        if not docs:
            return net
        merged = dict(docs[-1], benchmarks=[b for d in docs for b in d["benchmarks"]])
        try:
            return link_run.widen(net, merged, f"calibration runs over the {mbit} Mbit/s link, round {round_}")
        except link_run.LinkRunError:
            return net

    def netns_predictions(self, workload, mbit, round_):
        calibration = os.path.join(self.files, f"{workload}-calibration-netns-{mbit}mbit-round{round_}.json")
        measured = os.path.join(self.files, f"{workload}-measured-netns-{mbit}mbit-round{round_}.json")
        net = self.measured_link(mbit, workload, round_)
        base = (self.base_for_two[0], calibration)
        for strategy in NETNS_STRATEGIES:
            self.record(f"two namespaces, {mbit} Mbit/s", workload, strategy, 2,
                        self.predict(base, strategy, 2, net), measured)

    def netns_cases(self, workload, batch, round_):
        if self.args.repredict:
            for mbit in self.args.netns_mbit:
                if os.path.isfile(os.path.join(self.files, f"{workload}-measured-netns-{mbit}mbit-round{round_}.json")):
                    self.netns_predictions(workload, mbit, round_)
            return
        why = self.netns_available()
        if why:
            if not self.skipped:
                self.skipped.append(f"two namespaces: skipped, {why}")
            return
        tag = str(os.getpid() % 100000)
        ns = [f"ddpbp-a{tag}", f"ddpbp-b{tag}"]
        ifs = [f"dpa{tag}", f"dpb{tag}"]
        addrs = ["10.231.9.1", "10.231.9.2"]
        try:
            for name in ns:
                run(["ip", "netns", "add", name])
            run(["ip", "link", "add", ifs[0], "netns", ns[0], "type", "veth", "peer", "name", ifs[1], "netns", ns[1]])
            for i in range(2):
                run(["ip", "-n", ns[i], "addr", "add", f"{addrs[i]}/24", "dev", ifs[i]])
                run(["ip", "-n", ns[i], "link", "set", "lo", "up"])
                run(["ip", "-n", ns[i], "link", "set", ifs[i], "up"])
            for mbit in self.args.netns_mbit:
                for i in range(2):
                    run(["tc", "-n", ns[i], "qdisc", "replace", "dev", ifs[i], "root", "tbf", "rate", f"{mbit}mbit",
                         "burst", self.args.netns_burst, "latency", "100ms"])
                # The slow-down on this link is fitted from a ddp run of its own over it, as on
                # loopback, and the link's efficiency range widened by what it and zero1 reached.
                calibration = os.path.join(self.files, f"{workload}-calibration-netns-{mbit}mbit-round{round_}.json")
                self.run_in_namespaces(ns, ifs, addrs, NETNS_CALIBRATION, batch, workload, calibration)
                measured = os.path.join(self.files, f"{workload}-measured-netns-{mbit}mbit-round{round_}.json")
                self.run_in_namespaces(ns, ifs, addrs, NETNS_STRATEGIES, batch, workload, measured)
                self.netns_predictions(workload, mbit, round_)
        finally:
            for name in ns:
                subprocess.run(["ip", "netns", "del", name], stderr=subprocess.DEVNULL)

    def run_in_namespaces(self, ns, ifs, addrs, strategies, batch, workload, json_path):
        """One rank in each namespace, launched torchrun-style; rank 0 writes `json_path`."""
        procs = self.children
        for rank in range(2):
            env = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
                       MASTER_ADDR=addrs[0], MASTER_PORT="29533", GLOO_SOCKET_IFNAME=ifs[rank])
            out = ["--json", json_path] if rank == 0 else ["--no-json"]
            # Two nodes have a core each: a rank alone in its namespace would pin itself to the
            # first core, the other node's as well.
            pin = ["taskset", "-c", str(sorted(os.sched_getaffinity(0))[rank % self.cores])]
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns[rank]] + pin
                                          + [self.exe, "--strategy", ",".join(strategies), "--batch", str(batch)]
                                          + out + self.common(workload),
                                          env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True))
        for p in list(procs):
            _, err = p.communicate()
            procs.remove(p)
            if p.returncode != 0:
                raise SystemExit(f"projection_validation: a namespace rank exited {p.returncode}: "
                                 f"{err.strip()[-2000:]}")

    def write(self):
        rows = []
        for (setting, workload, strategy, world), x in self.samples.items():
            round_errors = [p / m - 1 for p, m in zip(x["predicted_ms"], x["measured_ms"])]
            rows.append({"setting": setting, "workload": workload, "strategy": strategy, "world": world,
                         "rounds": len(x["measured_ms"]), "predicted_ms": stats.median(x["predicted_ms"]),
                         "measured_ms": stats.median(x["measured_ms"]), "error": stats.median(round_errors),
                         "round_errors": round_errors,
                         "measured_ms_each_round": x["measured_ms"], "predicted_ms_each_round": x["predicted_ms"],
                         "before_round_errors": [p / m - 1 for p, m in zip(x["before_ms"], x["measured_ms"])],
                         "band_ms_each_round": x["band_ms"], "slowdown_each_round": x["slowdown"],
                         "inside_band_rounds": sum(1 for band, m in zip(x["band_ms"], x["measured_ms"])
                                                   if band and band[0] <= m <= band[1]),
                         "predicted_exposed_comm_ms": stats.median(x["predicted_exposed_comm_ms"])
                         if x["predicted_exposed_comm_ms"] else None,
                         "measured_exposed_comm_ms": stats.median(x["measured_exposed_comm_ms"])
                         if x["measured_exposed_comm_ms"] else None,
                         "measured_files": x["files"]})
        doc = {"machine": {"cpus": os.cpu_count(), "uname": " ".join(os.uname())}, "settings": vars(self.args),
               "network_fit": self.loopback.to_json(), "rows": rows, "skipped": self.skipped,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
        write_outputs(self.out, doc)


    def stop_children(self):
        for p in self.children:
            if p.poll() is None:
                p.kill()
                p.wait()


def signed_summary(errors):
    """Signed errors of a set of cases: median, spread, how many low and how many high."""
    if not errors:
        return None
    return {"median": stats.median(errors), "min": min(errors), "max": max(errors),
            "low": sum(1 for e in errors if e < 0), "high": sum(1 for e in errors if e > 0), "cases": len(errors)}


def _signed_text(name, s):
    return (f"{name}: signed error median {s['median'] * 100:+.1f}% (from {s['min'] * 100:+.1f}% to "
            f"{s['max'] * 100:+.1f}%), {s['low']} of {s['cases']} low and {s['high']} high")


def write_outputs(out, doc):
    """validation.json and validation.md from the rows. A case's error is the median over rounds of
    each round's error: a round predicts from a base run made just before its measured run, so the
    pair shares the machine's state of the moment (this VM drifts by tens of percent between
    minutes); the error of the medians (predicted over all rounds against measured over all
    rounds, which pairs runs from different moments) is given beside it."""
    rows = doc["rows"]
    for r in rows:
        r["error"] = stats.median(r["round_errors"])
        r["error_of_medians"] = r["predicted_ms"] / r["measured_ms"] - 1
        if r.get("before_round_errors"):
            r["before_error"] = stats.median(r["before_round_errors"])
    errors = [abs(r["error"]) for r in rows]
    doc["summary"] = {"cases": len(rows), "median_abs_error": stats.median(errors) if errors else None,
                      "max_abs_error": max(errors) if errors else None,
                      "median_abs_error_of_medians": stats.median([abs(r["error_of_medians"]) for r in rows])
                      if rows else None,
                      "under_predicted": sum(1 for r in rows if r["error"] < 0),
                      "signed": signed_summary([r["error"] for r in rows]),
                      "signed_before": signed_summary([r["before_error"] for r in rows if "before_error" in r]),
                      # Rows of a file from before the band have none: they count neither way.
                      "rounds_inside_band": sum(r.get("inside_band_rounds", 0) for r in rows),
                      "rounds": sum(r["rounds"] for r in rows if r.get("band_ms_each_round"))}
    for strategies, key in ((("ddp", "dp"), "signed_ddp_dp"), (("zero1", "zero2", "fsdp"), "signed_sharded")):
        doc["summary"][key] = signed_summary([r["error"] for r in rows if r["strategy"] in strategies])
    # Issue 48's test: ddp and the sharded strategies over the namespace links, whatever bandwidth.
    netns = [r for r in rows if r["setting"].startswith("two namespaces")]
    doc["summary"]["signed_netns"] = signed_summary([r["error"] for r in netns])
    doc["summary"]["netns_rounds_inside_band"] = sum(r.get("inside_band_rounds", 0) for r in netns)
    doc["summary"]["netns_rounds"] = sum(r["rounds"] for r in netns if r.get("band_ms_each_round"))
    with open(os.path.join(out, "validation.json"), "w") as f:
        json.dump(doc, f, indent=1)
    lines = ["| setting | case | world | error (median of rounds) | before issue 48 | error by round | predicted / "
             "measured ms (medians) | band ms (median round's) | exposed comm predicted / measured ms |",
             "|---|---|---:|---:|---:|---|---:|---:|---:|"]
    for r in rows:
        exposed = "-"
        if r["predicted_exposed_comm_ms"] is not None and r["measured_exposed_comm_ms"] is not None:
            exposed = f"{r['predicted_exposed_comm_ms']:.1f} / {r['measured_exposed_comm_ms']:.1f}"
        by_round = ", ".join(f"{e * 100:+.0f}%" for e in r["round_errors"])
        before = f"{r['before_error'] * 100:+.1f}%" if "before_error" in r else "-"
        bands = [b for b in r.get("band_ms_each_round") or [] if b]
        band = "-"
        if bands:
            lo, hi = sorted(bands, key=lambda b: b[0] + b[1])[len(bands) // 2]
            band = f"{lo:.1f}-{hi:.1f} ({r.get('inside_band_rounds', 0)}/{r['rounds']} in)"
        lines.append(f"| {r['setting']} | {r['workload']}/{r['strategy']} | {r['world']} | {r['error'] * 100:+.1f}% | "
                     f"{before} | {by_round} | {r['predicted_ms']:.1f} / {r['measured_ms']:.1f} | {band} | {exposed} |")
    lines.append("")
    summary = doc["summary"]
    if errors:
        lines.append(f"Median absolute error over {len(errors)} cases: {summary['median_abs_error'] * 100:.1f}% "
                     f"(largest {summary['max_abs_error'] * 100:.1f}%; {summary['under_predicted']} of {len(errors)} "
                     f"predicted low). A case's error is the median over its {rows[0]['rounds']} rounds of the "
                     f"round's error, a round being a base run and the measured run back to back; the error of "
                     f"the medians over all rounds would give {summary['median_abs_error_of_medians'] * 100:.1f}%.")
        lines.append("")
        for name, key in (("Now, every case", "signed"), ("Before issue 48, every case", "signed_before"),
                          ("Now, ddp and dp", "signed_ddp_dp"), ("Now, zero1, zero2 and fsdp", "signed_sharded"),
                          ("Now, ddp, zero1, zero2 and fsdp over the two namespaces", "signed_netns")):
            if summary.get(key):
                lines.append("- " + _signed_text(name, summary[key]))
        if summary.get("rounds"):
            lines.append(f"- Measured step inside the printed band in {summary['rounds_inside_band']} of "
                         f"{summary['rounds']} rounds.")
        if summary.get("netns_rounds"):
            lines.append(f"- Over the two namespaces, inside the band in {summary['netns_rounds_inside_band']} of "
                         f"{summary['netns_rounds']} rounds.")
    lines += doc["skipped"]
    with open(os.path.join(out, "validation.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--render", action="store_true", help="only rewrite OUT/validation.md from OUT/validation.json")
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--workloads", default="mlp")
    p.add_argument("--worlds", default="2,3,4")
    p.add_argument("--netns-mbit", default="1000,400")
    p.add_argument("--netns-burst", default="256kb", help="tbf's bucket on the shaped veth, in tc's size syntax "
                                                           "(default 256kb; 32kb no longer keeps 1000 Mbit/s)")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds of (base, measured) runs; each case's figures are medians over them (default 3)")
    p.add_argument("--repredict", metavar="FROM_DIR",
                   help="measure nothing: predict again from the files an earlier run kept in FROM_DIR, with its "
                        "settings, and write OUT's validation.json and .md")
    args = p.parse_args()
    if args.render:
        with open(os.path.join(args.out, "validation.json")) as f:
            write_outputs(args.out, json.load(f))
        return
    if args.repredict:
        try:
            with open(os.path.join(args.repredict, "validation.json")) as f:
                kept = json.load(f)["settings"]
        except (OSError, ValueError, KeyError) as e:
            raise SystemExit(f"projection_validation: --repredict {args.repredict}: no earlier run's "
                             f"validation.json with its settings ({e})")
        # The earlier run's settings; a run from before --netns-burst shaped with 256kb.
        for key in ("workloads", "steps", "repetitions", "rounds"):
            setattr(args, key, kept[key])
        args.worlds = ",".join(str(w) for w in kept["worlds"])
        args.netns_mbit = ",".join(str(m) for m in kept["netns_mbit"])
        args.netns_burst = kept.get("netns_burst", "256kb")
    args.worlds = [int(x) for x in args.worlds.split(",")]
    args.netns_mbit = [int(x) for x in args.netns_mbit.split(",") if x]
    os.makedirs(args.out, exist_ok=True)
    v = Validation(args)
    # A stopped script still deletes its namespaces (the finally blocks) and kills its ranks.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        v.fit_network()
        workloads = args.workloads.split(",")
        batches = {w: v.global_batch(w) for w in workloads}
        for round_ in range(args.rounds):
            for workload in workloads:
                v.loopback_cases(workload, batches[workload], round_)
                if args.netns_mbit and 2 in args.worlds:
                    v.netns_cases(workload, batches[workload], round_)
    finally:
        v.stop_children()
    v.write()


if __name__ == "__main__":
    main()
