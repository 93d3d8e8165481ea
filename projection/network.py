"""Networks as data: the links a projection assumes, where they come from, and fits to measured files.

A network is two links, one inside a node and one between nodes, each a bandwidth (what one device can
send in one direction) and a per-step latency (alpha), plus how many devices and NICs a node has. It
comes from a preset pair ("nvlink4+ndr400", figures and sources in networks.json), from a network file
written by hand (the same fields), or from a fit of t = a + b * bytes to measured all-reduce times:
ddpbench-micro's JSON (Gloo between two ranks) or nccl-tests' all_reduce_perf output.
"""
import json
import math
import os
import re
from dataclasses import dataclass, field, replace
from typing import List, Optional

from reports import files

PRESETS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "networks.json")
GB = 1e9
US = 1e-6


class NetworkError(ValueError):
    """A network that cannot be used: an unknown preset, an unreadable or malformed file, a bad fit."""


@dataclass(frozen=True)
class Link:
    bandwidth: float  # bytes/s one device sends in one direction
    alpha: float      # seconds: the latency of one step of a pipelined collective
    source: str = ""
    # The fraction of `bandwidth` a collective reaches (nccl-tests' bus bandwidth against the line
    # rate, for a preset), the range it is known to vary over, and where the figures come from. A
    # link fitted to measured times has it by construction (1.0), its range the fit's spread.
    efficiency: float = 1.0
    efficiency_low: float = 1.0
    efficiency_high: float = 1.0
    efficiency_source: str = "nominal: no efficiency stated"
    # A shaper's token bucket in front of the link (tc tbf; a NIC has none, 0): it fills at the
    # link's nominal rate while the link idles, up to this many bytes, and a collective sends what it
    # holds at the speed under the shaper, so one after an idle gap runs faster than the rate allows.
    burst_bytes: float = 0.0

    @property
    def achievable(self):
        """Bytes/s a collective moves over this link."""
        return self.bandwidth * self.efficiency

    def at(self, bound):
        """This link at the low or the high end of its efficiency's range ("low", "high"), or as it is."""
        return replace(self, efficiency={"low": self.efficiency_low, "high": self.efficiency_high}.get(bound, self.efficiency))

    def describe_efficiency(self):
        text = f"achievable {self.efficiency:.0%} of it"
        if (self.efficiency_low, self.efficiency_high) != (self.efficiency, self.efficiency):
            text += f" ({self.efficiency_low:.0%}-{self.efficiency_high:.0%})"
        if self.burst_bytes:
            text += (f", a {self.burst_bytes / 1024:.4g} KiB token bucket (a collective after an idle gap sends "
                     f"up to that much at the speed under the shaper)")
        return text


@dataclass(frozen=True)
class Network:
    name: str
    devices_per_node: int
    intra: Link
    inter: Link
    nics_per_node: int = 1
    base_latency: float = 0.0  # seconds per collective, whatever its size
    # DataParallel's copies between devices of one process (replicate, reduce, scatter, gather);
    # the intra-node link unless measured apart (CPU virtual devices copy through memory).
    copy: Optional[Link] = None
    # Ranks of one node that can compute at the same time: the devices, except on a CPU host whose
    # virtual devices share its cores (cores / threads per rank).
    compute_slots_per_node: Optional[int] = None
    # Communication that the node's cores carry themselves (Gloo over loopback: every byte is a
    # memory copy by a CPU), so it slows down like compute when ranks outnumber the slots.
    transport_on_compute_cores: bool = False
    sources: List[str] = field(default_factory=list)

    @property
    def copy_link(self):
        return self.copy or self.intra

    def at(self, bound):
        """The network with every link at the low or high end of its efficiency's range: the slow and
        the fast edge of a projection's band."""
        return replace(self, intra=self.intra.at(bound), inter=self.inter.at(bound),
                       copy=self.copy.at(bound) if self.copy else None)

    def efficiency_lines(self):
        """Each link's efficiency with its source, once per distinct link."""
        out, seen = [], set()
        for label, l in (("intra-node", self.intra), ("inter-node", self.inter), ("DataParallel copies", self.copy)):
            if l is None or (l.efficiency, l.efficiency_low, l.efficiency_high, l.efficiency_source) in seen:
                continue
            seen.add((l.efficiency, l.efficiency_low, l.efficiency_high, l.efficiency_source))
            out.append(f"  {label} efficiency {l.efficiency:.0%}: {l.efficiency_source}")
        return out

    @property
    def compute_slots(self):
        return self.compute_slots_per_node or self.devices_per_node

    def describe(self):
        """Lines that state every figure the projection uses, for the table and the JSON."""
        lines = [f"network {self.name}: {self.devices_per_node} device(s) per node"]
        lines.append(f"  intra-node: {self.intra.bandwidth / GB:.4g} GB/s per device per direction, "
                     f"{self.intra.describe_efficiency()}, {self.intra.alpha / US:.3g} us a step")
        lines.append(f"  inter-node: {self.inter.bandwidth / GB:.4g} GB/s per NIC, {self.inter.describe_efficiency()}, "
                     f"{self.nics_per_node} NIC(s) per node, {self.inter.alpha / US:.3g} us a step")
        if self.base_latency:
            lines.append(f"  {self.base_latency / US:.3g} us fixed cost per collective")
        if self.copy:
            lines.append(f"  DataParallel copies: {self.copy.bandwidth / GB:.4g} GB/s, {self.copy.alpha / US:.3g} us each")
        if self.compute_slots_per_node:
            lines.append(f"  at most {self.compute_slots_per_node} rank(s) of a node compute at once; more share "
                         f"the slots and slow down in proportion")
        if self.transport_on_compute_cores:
            lines.append("  communication is copied by the node's cores, and slows down with compute")
        lines += self.efficiency_lines()
        lines += [f"  source: {s}" for s in self.sources if s]
        return lines

    def to_json(self):
        def link(l):
            return {"bandwidth_GBps": l.bandwidth / GB, "alpha_us": l.alpha / US, "source": l.source,
                    "efficiency": {"value": l.efficiency, "low": l.efficiency_low, "high": l.efficiency_high,
                                   "source": l.efficiency_source},
                    "burst_bytes": l.burst_bytes}
        return {"name": self.name, "devices_per_node": self.devices_per_node, "nics_per_node": self.nics_per_node,
                "base_latency_us": self.base_latency / US, "intra": link(self.intra), "inter": link(self.inter),
                "copy": link(self.copy) if self.copy else None, "compute_slots_per_node": self.compute_slots_per_node,
                "transport_on_compute_cores": self.transport_on_compute_cores}


def _presets():
    with open(PRESETS_FILE) as f:
        return json.load(f)


def preset_names():
    p = _presets()
    return sorted(p["intra"]), sorted(p["inter"])


def _number(obj, key, where, positive=True, required=True):
    v = obj.get(key)
    if v is None and not required:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v in (float("inf"), float("-inf")):
        raise NetworkError(f"{where}: {key} should be a number, not {v!r}")
    if (positive and v <= 0) or v < 0:
        raise NetworkError(f"{where}: {key} should be {'above' if positive else 'at least'} 0, not {v!r}")
    return v


def _efficiency(obj, where):
    """A link's "efficiency": a fraction, or {"value", "low", "high", "source"}; none: nominal."""
    e = obj.get("efficiency")
    if e is None:
        return {}
    if not isinstance(e, dict):
        e = {"value": e}
    value = _number(e, "value", f"{where}: efficiency")
    low = _number(e, "low", f"{where}: efficiency", required=False)
    high = _number(e, "high", f"{where}: efficiency", required=False)
    low = value if low is None else low
    high = value if high is None else high
    if not low <= value <= high or high > 2:
        raise NetworkError(f"{where}: efficiency should hold low <= value <= high (at most 2), not "
                           f"{low!r}, {value!r}, {high!r}")
    return {"efficiency": value, "efficiency_low": low, "efficiency_high": high,
            "efficiency_source": str(e.get("source", f"stated in {where}"))}


def _link(obj, where):
    if not isinstance(obj, dict):
        raise NetworkError(f"{where}: should be an object with bandwidth_GBps and alpha_us")
    return Link(_number(obj, "bandwidth_GBps", where) * GB, _number(obj, "alpha_us", where, positive=False) * US,
                str(obj.get("source", "")), **_efficiency(obj, where),
                burst_bytes=_number(obj, "burst_bytes", where, positive=False, required=False) or 0.0)


def from_presets(intra_name, inter_name):
    p = _presets()
    if intra_name not in p["intra"]:
        raise NetworkError(f"--network: {intra_name!r} is no intra-node preset ({', '.join(sorted(p['intra']))})")
    if inter_name not in p["inter"]:
        raise NetworkError(f"--network: {inter_name!r} is no inter-node preset ({', '.join(sorted(p['inter']))})")
    intra, inter = p["intra"][intra_name], p["inter"][inter_name]
    base = p["base_latency_us"]
    return Network(name=f"{intra_name}+{inter_name}", devices_per_node=int(intra["devices_per_node"]),
                   intra=_link(intra, intra_name), inter=_link(inter, inter_name),
                   nics_per_node=int(inter["nics_per_node"]), base_latency=base["value"] * US,
                   sources=[f"{intra_name}: {intra['source']}", f"{inter_name}: {inter['source']}",
                            f"fixed cost: {base['source']}"])


def from_description(doc, path):
    """A network file written by hand: the fields Network.to_json writes."""
    where = f"--network {path}"
    for key in ("devices_per_node", "intra"):
        if key not in doc:
            raise NetworkError(f"{where}: lacks {key}")
    intra = _link(doc["intra"], f"{where}: intra")
    inter = _link(doc["inter"], f"{where}: inter") if doc.get("inter") is not None else intra
    copy = _link(doc["copy"], f"{where}: copy") if doc.get("copy") is not None else None
    devices = _number(doc, "devices_per_node", where)
    nics = _number(doc, "nics_per_node", where, required=False) or 1
    slots = _number(doc, "compute_slots_per_node", where, required=False)
    for name, v in (("devices_per_node", devices), ("nics_per_node", nics), ("compute_slots_per_node", slots)):
        if v is not None and v != int(v):
            raise NetworkError(f"{where}: {name} should be a whole number, not {v!r}")
    return Network(name=str(doc.get("name", os.path.basename(path))), devices_per_node=int(devices), intra=intra,
                   inter=inter, nics_per_node=int(nics),
                   base_latency=(_number(doc, "base_latency_us", where, positive=False, required=False) or 0) * US,
                   copy=copy, compute_slots_per_node=int(slots) if slots else None,
                   transport_on_compute_cores=bool(doc.get("transport_on_compute_cores", False)),
                   sources=[str(doc.get("source", f"network file {path}"))])


def fit_line(points):
    """Least squares t = a + b * x over (x, t) points; a is clamped at 0 (no negative latency)."""
    for x, t in points:
        if not (math.isfinite(x) and math.isfinite(t)) or x < 0 or t <= 0:
            raise NetworkError(f"a measured time of {t!r} s at {x!r} bytes: times must be finite and above 0")
    if len({x for x, _ in points}) < 2:
        raise NetworkError("a fit needs all-reduce times at two sizes at least")
    n = len(points)
    mx = sum(x for x, _ in points) / n
    mt = sum(t for _, t in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (t - mt) for x, t in points) / sxx
    if b <= 0:
        raise NetworkError("the measured times do not grow with size: no bandwidth can be fitted")
    a = max(0.0, mt - b * mx)
    return a, b


def _fit(points, path):
    """fit_line, its refusal naming the network file."""
    try:
        return fit_line(points)
    except NetworkError as e:
        raise NetworkError(f"--network {path}: {e}") from e


def fitted_efficiency(points, a, b, what):
    """A fitted link's efficiency: 1.0 by construction (the measured times already hold it), its range
    how far the bandwidth-bound points (where bytes cost at least the latency) lie from the line: a
    point measured slower than the line is a link that reached less."""
    ratios = [(a + b * x) / t for x, t in points if b * x >= a] or [(a + b * x) / t for x, t in points]
    return {"efficiency": 1.0, "efficiency_low": min(1.0, min(ratios)), "efficiency_high": max(1.0, max(ratios)),
            "efficiency_source": f"1.0 by construction (fitted to measured {what}); the range is the "
                                 f"measured points' spread around the fit"}


_TIME_TO_S = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def _micro_points(doc, family, path):
    """(bytes, seconds) of each `family/BYTES` iteration entry; an entry that is not what Google
    Benchmark writes is a NetworkError naming it."""
    where = f"--network {path}"
    entries = doc.get("benchmarks")
    if not isinstance(entries, list):
        raise NetworkError(f"{where}: benchmarks should be an array")
    points = []
    for i, b in enumerate(entries):
        if not isinstance(b, dict):
            raise NetworkError(f"{where}: benchmarks[{i}] is not an object")
        name = b.get("name", "")
        if not isinstance(name, str) or b.get("run_type", "iteration") != "iteration" or b.get("error_occurred"):
            continue
        m = re.fullmatch(rf"{family}/(\d+)(/.*)?", name)
        if not m:
            continue
        unit = b.get("time_unit", "ns")
        if unit not in _TIME_TO_S:
            raise NetworkError(f"{where}: benchmarks[{i}].time_unit is {unit!r}, not one of {', '.join(_TIME_TO_S)}")
        t = b.get("real_time")
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
            raise NetworkError(f"{where}: benchmarks[{i}] ({name}) has real_time {t!r}, not a time above 0")
        points.append((float(m.group(1)), t * _TIME_TO_S[unit]))
    return points


def from_micro(doc, path):
    """ddpbench-micro's JSON: Gloo all-reduce between two ranks (t = 2 alpha + bytes / B for a ring of
    two) for the link, and its replicate copy for DataParallel's copies. One host: the same link
    inside and between nodes, 1 device per node unless --gpus-per-node says otherwise."""
    points = _micro_points(doc, "BM_GlooAllreduce", path)
    if not points:
        raise NetworkError(f"--network {path}: a ddpbench-micro file without BM_GlooAllreduce results")
    a, b = _fit(points, path)
    link = Link(1.0 / b, a / 2, f"fitted to {len(points)} Gloo all-reduce sizes between 2 ranks in {path}",
                **fitted_efficiency(points, a, b, "Gloo all-reduce times"))
    copy = None
    copies = _micro_points(doc, "BM_ReplicateCopy", path)
    if len(copies) >= 2:
        ca, cb = _fit(copies, path)
        copy = Link(1.0 / cb, ca, f"fitted to {len(copies)} replicate-copy sizes in {path}",
                    **fitted_efficiency(copies, ca, cb, "copy times"))
    return Network(name=os.path.basename(path), devices_per_node=1, intra=link, inter=link, nics_per_node=1,
                   copy=copy, transport_on_compute_cores=True, sources=[link.source] + ([copy.source] if copy else []))


def from_nccl_tests(text, path):
    """all_reduce_perf's output: rows of size, count, type, redop, root, time (us), algbw, busbw, ...;
    ranks counted from its '#  Rank' lines, hosts from the names they print. t = base + 2 (N-1) alpha
    + 2 (N-1) / N * bytes / B."""
    ranks = re.findall(r"^#\s+Rank\s+\d+\s+Group\s+\d+\s+Pid\s+\d+\s+on\s+(\S+)", text, re.M)
    if not ranks:
        raise NetworkError(f"--network {path}: no '#  Rank N Group N Pid N on HOST' lines: not nccl-tests output?")
    n = len(ranks)
    if n < 2:
        raise NetworkError(f"--network {path}: an all-reduce of one rank says nothing of a network")
    points = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) >= 8 and not line.lstrip().startswith("#") and cols[0].isdigit() and cols[2] in (
                "float", "half", "bfloat16", "double", "int32", "int8", "uint8", "int64"):
            try:
                points.append((float(cols[0]), float(cols[5]) * 1e-6))
            except ValueError:
                continue
    if not points:
        raise NetworkError(f"--network {path}: no result rows found")
    a, b = _fit(points, path)
    hosts = len(set(ranks))
    link = Link(2 * (n - 1) / n / b, a / (2 * (n - 1)),
                f"fitted to {len(points)} all_reduce_perf sizes over {n} ranks on {hosts} host(s) in {path}",
                **fitted_efficiency(points, a, b, "all_reduce_perf times"))
    per_node = n // hosts
    return Network(name=os.path.basename(path), devices_per_node=max(1, per_node), intra=link, inter=link,
                   nics_per_node=1, sources=[link.source])


def load(spec, devices_per_node=None):
    """--network SPEC: INTRA+INTER presets, or a file (network description, ddpbench-micro JSON,
    nccl-tests output). devices_per_node (--gpus-per-node) overrides what the spec says."""
    if os.path.exists(spec):
        try:
            raw = files.read_regular_file(spec).decode("utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise NetworkError(f"--network {spec}: cannot read: {getattr(e, 'strerror', None) or e}") from e
        try:
            doc = json.loads(raw)
        except json.JSONDecodeError:
            doc = None
        except RecursionError as e:
            raise NetworkError(f"--network {spec}: JSON nested too deeply to be a network file") from e
        if isinstance(doc, dict) and isinstance(doc.get("context"), dict) and "ddpbench_micro" in doc["context"]:
            net = from_micro(doc, spec)
        elif isinstance(doc, dict):
            net = from_description(doc, spec)
        elif doc is not None:
            raise NetworkError(f"--network {spec}: JSON, but not a network description or a ddpbench-micro file")
        else:
            net = from_nccl_tests(raw, spec)
    elif "+" in spec:
        intra, _, inter = spec.partition("+")
        net = from_presets(intra, inter)
    else:
        intra, inter = preset_names()
        raise NetworkError(f"--network: {spec!r} is neither a file nor INTRA+INTER presets "
                           f"(intra: {', '.join(intra)}; inter: {', '.join(inter)})")
    if devices_per_node is not None:
        net = replace(net, devices_per_node=devices_per_node)
    return net
