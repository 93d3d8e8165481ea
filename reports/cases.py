"""The cases of one or more ddpbench results files, as the report and its charts read them: one
Case per (file, case name), its repetitions and median, and a tag that tells its file from the
others' in a report of several."""
import os
from collections import OrderedDict


class Case:
    """One measured or skipped case of one results file."""

    def __init__(self, name, source):
        self.name = name
        self.source = source
        self.tag = ""  # what tells its file from the others' in a report of several (source_tags)
        self.iterations = []
        self.median = None
        self.fields = None
        self.context = {}  # its file's context: the settings it ran with (reports/levers.py reads its levers)

    @property
    def workload(self):
        return self.fields["workload"]

    @property
    def strategy(self):
        return self.fields["strategy"]

    @property
    def world(self):
        return int(self.fields["world_size"])

    @property
    def status(self):
        return self.fields["status"]

    @property
    def mesh(self):
        """The mesh the case ran on, as --mesh writes it ("dp=2,tp=2", from its comm's dimensions),
        or "": a tp or pp case on a mesh is another layout than the same strategy over the world."""
        dims = (self.fields.get("comm") or {}).get("mesh") or []
        return ",".join(f"{d['name']}={d['size']}" for d in dims)

    @property
    def throughputs(self):
        return [b["items_per_second"] for b in self.iterations if "items_per_second" in b]

    @property
    def step_times(self):
        return [t for b in self.iterations for t in b["ddpbench"].get("step_times_ms", [])]


def source_tags(sources):
    """A short tag per file name, for labels in a report of several files: the part of each name
    that the others do not share (all-workloads-h100-fp32.json, ...-bf16.json: fp32, bf16); the
    whole name where that part is empty; nothing for a single file."""
    names = list(OrderedDict.fromkeys(sources))
    if len(names) < 2:
        return {n: "" for n in names}
    prefix = os.path.commonprefix(names)
    suffix = os.path.commonprefix([n[::-1] for n in names])[::-1]
    tags = {}
    for n in names:
        core = n[len(prefix):len(n) - len(suffix)] if len(prefix) + len(suffix) < len(n) else ""
        tags[n] = core.strip("-_.") or n
    return tags


def label(c):
    name = f"{c.name} ({c.mesh})" if c.mesh else c.name
    return f"{name} [{c.tag}]" if c.tag else name


def collect_cases(docs):
    cases = OrderedDict()
    for source, doc in docs:
        for b in doc["benchmarks"]:
            name = b.get("run_name", b["name"])
            key = (source, name)
            case = cases.setdefault(key, Case(name, source))
            if case.fields is None:
                case.fields = b["ddpbench"]
                case.context = doc["context"]
            if b["run_type"] == "iteration" and not b.get("error_occurred"):
                case.iterations.append(b)
            elif b.get("aggregate_name") == "median":
                case.median = b
    tags = source_tags([source for source, _ in docs])
    for case in cases.values():
        case.tag = tags[case.source]
    return list(cases.values())


def measured(cases):
    """Cases whose numbers stand: ok, with repetitions. A failed case's kept repetitions are not ranked."""
    return [c for c in cases if c.iterations and c.status == "ok"]
