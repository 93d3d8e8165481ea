"""Reading ddpbench results files: the one place that knows the JSON contract's version and shape.

Readers refuse a schema version they do not know rather than misread it (nvbench's habit), and
refuse a file whose fields have the wrong type or an impossible value with one line naming the file
and the field, so that nothing downstream (a chart, a verdict) ever meets them. ddpbench-micro's
files are Google Benchmark's own JSON and are read by the same rules where their fields overlap.
"""
import json
import math
import re
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import List, Optional

from . import files, stats

# The versions of context.json_schema_version this package understands.
KNOWN_SCHEMA_VERSIONS = (1,)

STATUSES = ("ok", "skipped", "not_run", "failed", "oom")
RUN_TYPES = ("iteration", "aggregate")
TO_MS = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}

# No quantity ddpbench writes comes near this (a petabyte, an exaFLOP per step); beyond it a file is
# damaged, and charts and ratios would overflow.
LARGEST = 1e18
# No step, all-reduce or copy takes less than a picosecond; a time below it is damage, not a sample.
SHORTEST_MS = 1e-9


class ResultsError(ValueError):
    """A results file that cannot be used: unreadable, malformed or of an unknown schema."""


def _is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


# What each field a reader uses may hold, by path ("[*]" for any list element, "*" for any key).
# A field that is absent is not checked here; the readers that need it say so.
_STR, _NUM, _BOOL, _DICT, _LIST, _NULL = "string", "number", "boolean", "object", "array", "null"
_TYPES = {_STR: lambda v: isinstance(v, str), _NUM: _is_number, _BOOL: lambda v: isinstance(v, bool),
          _DICT: lambda v: isinstance(v, dict), _LIST: lambda v: isinstance(v, list), _NULL: lambda v: v is None}
_SCHEMA = {
    "context": (_DICT,), "context/date": (_STR,), "context/host_name": (_STR, _NULL), "context/num_cpus": (_NUM,),
    "context/executable": (_STR,), "context/ddpbench": (_DICT,), "context/ddpbench/version": (_STR,),
    "context/ddpbench/git_sha": (_STR, _NULL), "context/ddpbench/torch_version": (_STR, _NULL),
    "context/ddpbench/cuda_version": (_STR, _NULL), "context/ddpbench/nccl_version": (_STR, _NULL),
    "context/ddpbench/argv": (_LIST,), "context/ddpbench/argv/[*]": (_STR,),
    "context/ddpbench/devices": (_LIST,), "context/ddpbench/devices/[*]": (_DICT,),
    "context/ddpbench/devices/[*]/index": (_NUM,), "context/ddpbench/devices/[*]/name": (_STR,),
    "context/ddpbench/devices/[*]/kind": (_STR,), "context/ddpbench/devices/[*]/total_memory_bytes": (_NUM,),
    "context/ddpbench/env": (_DICT,), "context/ddpbench/env/*": (_STR,),
    "context/ddpbench/settings": (_DICT,), "context/ddpbench/settings/dtype": (_STR,),
    "context/ddpbench/settings/strategy_settings": (_DICT,),
    "context/ddpbench/settings/strategy_settings/fsdp/reshard_after_forward": (_BOOL,),
    "context/ddpbench/settings/strategy_settings/fsdp/prefetch": (_BOOL,),
    "context/ddpbench/settings/strategy_settings/fsdp/overlap": (_BOOL,),
    "context/ddpbench/settings/strategy_settings/tp/sequence_parallel": (_BOOL,),
    "context/ddpbench/settings/strategy_settings/mesh": (_STR, _NULL),
    "context/ddpbench/settings/strategy_settings/levers": (_DICT,),
    "context/ddpbench/settings/strategy_settings/levers/activation_checkpointing": (_STR,),
    "context/ddpbench/settings/strategy_settings/levers/grad_accum": (_NUM,),
    "context/ddpbench/settings/strategy_settings/levers/sync_every_microbatch": (_BOOL,),
    "context/ddpbench/settings/strategy_settings/levers/no_sync_accum": (_BOOL,),
    "context/ddpbench/settings/strategy_settings/pp/schedule": (_STR,),
    "context/ddpbench/settings/strategy_settings/pp/microbatches": (_NUM, _NULL),
    "context/ddpbench/settings/strategy_settings/pp/stages_per_rank": (_NUM, _NULL),
    "context/ddpbench/settings/strategy_settings/pp/balance": (_STR,),
    "context/ddpbench/settings/strategy_settings/pp/split": (_LIST, _NULL),
    "context/ddpbench/settings/strategy_settings/pp/split/[*]": (_NUM,),
    "context/ddpbench/complete": (_BOOL,), "context/ddpbench/interruption": (_STR,),
    "benchmarks": (_LIST,), "benchmarks/[*]": (_DICT,), "benchmarks/[*]/name": (_STR,),
    "benchmarks/[*]/run_name": (_STR,), "benchmarks/[*]/run_type": (_STR,), "benchmarks/[*]/aggregate_name": (_STR,),
    "benchmarks/[*]/real_time": (_NUM,), "benchmarks/[*]/cpu_time": (_NUM,), "benchmarks/[*]/time_unit": (_STR,),
    "benchmarks/[*]/items_per_second": (_NUM,), "benchmarks/[*]/error_occurred": (_BOOL,),
    "benchmarks/[*]/error_message": (_STR,), "benchmarks/[*]/bytes": (_NUM,), "benchmarks/[*]/busbw": (_NUM,),
    "benchmarks/[*]/bytes_per_second": (_NUM,),
    "benchmarks/[*]/ddpbench": (_DICT,), "benchmarks/[*]/ddpbench/workload": (_STR,),
    "benchmarks/[*]/ddpbench/strategy": (_STR,), "benchmarks/[*]/ddpbench/world_size": (_NUM,),
    "benchmarks/[*]/ddpbench/status": (_STR,), "benchmarks/[*]/ddpbench/reason": (_STR, _NULL),
    "benchmarks/[*]/ddpbench/note": (_STR, _NULL), "benchmarks/[*]/ddpbench/partial": (_BOOL,),
    "benchmarks/[*]/ddpbench/step_times_ms": (_LIST,), "benchmarks/[*]/ddpbench/step_times_ms/[*]": (_NUM,),
    "benchmarks/[*]/ddpbench/phases_ms": (_DICT,), "benchmarks/[*]/ddpbench/phases_ms/*": (_NUM,),
    "benchmarks/[*]/ddpbench/memory": (_LIST,), "benchmarks/[*]/ddpbench/memory/[*]": (_DICT,),
    "benchmarks/[*]/ddpbench/memory/[*]/peak_allocated_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/peak_reserved_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/held_before_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/parameter_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/gradient_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/optimizer_state_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/activation_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory/[*]/other_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/memory_imbalance": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/data_path": (_STR,),
    "benchmarks/[*]/ddpbench/scaling_efficiency": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/parity": (_DICT, _NULL), "benchmarks/[*]/ddpbench/parity/steps": (_NUM,),
    "benchmarks/[*]/ddpbench/parity/max_rel_param_diff": (_NUM,), "benchmarks/[*]/ddpbench/parity/tolerance": (_NUM,),
    "benchmarks/[*]/ddpbench/parity/within_tolerance": (_BOOL,), "benchmarks/[*]/ddpbench/parity/note": (_STR,),
    "benchmarks/[*]/ddpbench/parity/checked": (_BOOL,), "benchmarks/[*]/ddpbench/parity/worst_parameters": (_STR,),
    "benchmarks/[*]/ddpbench/loss_curve": (_DICT,), "benchmarks/[*]/ddpbench/loss_curve/samples_seen": (_LIST,),
    "benchmarks/[*]/ddpbench/loss_curve/samples_seen/[*]": (_NUM,),
    "benchmarks/[*]/ddpbench/loss_curve/loss": (_LIST,), "benchmarks/[*]/ddpbench/loss_curve/loss/[*]": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/loss_vs_single": (_DICT, _NULL), "benchmarks/[*]/ddpbench/async": (_DICT,),
    "benchmarks/[*]/ddpbench/precision": (_DICT,), "benchmarks/[*]/ddpbench/precision/achieved_ci95": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/precision/unresolved": (_BOOL,),
    "benchmarks/[*]/ddpbench/compute": (_DICT,), "benchmarks/[*]/ddpbench/compute/achieved_tflops": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/compute/fraction_of_peak": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/compute/peak_tflops": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/global_batch": (_NUM,), "benchmarks/[*]/ddpbench/workload_facts": (_DICT,),
    "benchmarks/[*]/ddpbench/micro_batches": (_NUM,), "benchmarks/[*]/ddpbench/micro_batch_samples": (_NUM,),
    "benchmarks/[*]/ddpbench/workload_facts/gradient_bytes": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/workload_facts/tokens_per_sample": (_NUM,),
    "benchmarks/[*]/ddpbench/workload_facts/max_tokens_per_sample": (_NUM,),
    "benchmarks/[*]/ddpbench/workload_facts/attention_flops_per_sample": (_NUM,),
    "benchmarks/[*]/ddpbench/workload_facts/attention_score_bytes_per_sample": (_NUM,),
    "benchmarks/[*]/ddpbench/workload_facts/fixed_activation_bytes": (_NUM,),
    "benchmarks/[*]/ddpbench/comm": (_DICT, _NULL), "benchmarks/[*]/ddpbench/comm/bytes_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/bucket_timeline": (_LIST,),
    "benchmarks/[*]/ddpbench/comm/units": (_LIST,),
    "benchmarks/[*]/ddpbench/comm/units/[*]": (_DICT,),
    "benchmarks/[*]/ddpbench/comm/units/[*]/bytes": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/units/[*]/root": (_BOOL,),
    "benchmarks/[*]/ddpbench/comm/bucket_timeline/[*]": (_DICT,),
    "benchmarks/[*]/ddpbench/comm/bucket_timeline/[*]/bytes": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/bucket_timeline/[*]/ready_ms": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/bucket_timeline/[*]/allreduce_ms": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/bucket_timeline/[*]/reduce_scatter_ms": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/reduce_scatter_bytes_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/all_gather_bytes_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/point_to_point_bytes_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline": (_DICT,), "benchmarks/[*]/ddpbench/pipeline/schedule": (_STR,),
    "benchmarks/[*]/ddpbench/pipeline/stages": (_NUM,), "benchmarks/[*]/ddpbench/pipeline/microbatches": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/chunks_per_rank": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/stage_units": (_LIST,),
    "benchmarks/[*]/ddpbench/pipeline/expected_bubble": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/bubble": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/pipeline/bubble_by_rank": (_LIST,),
    "benchmarks/[*]/ddpbench/pipeline/bubble_by_rank/[*]": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/balance": (_STR,),
    "benchmarks/[*]/ddpbench/pipeline/stage_parameters": (_LIST,),
    "benchmarks/[*]/ddpbench/pipeline/stage_parameters/[*]": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/stage_profile_ms": (_LIST, _NULL),
    "benchmarks/[*]/ddpbench/pipeline/stage_profile_ms/[*]": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/stage_imbalance": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/pipeline/compute_ms_by_rank": (_LIST,),
    "benchmarks/[*]/ddpbench/pipeline/compute_ms_by_rank/[*]": (_NUM,),
    "benchmarks/[*]/ddpbench/pipeline/compute_imbalance": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/comm/bytes_sent_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/allreduce_ms": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/comm/reduce_scatter_ms": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/comm/all_gather_ms": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/comm/mesh": (_LIST,),
    "benchmarks/[*]/ddpbench/comm/mesh/[*]": (_DICT,),
    "benchmarks/[*]/ddpbench/comm/mesh/[*]/name": (_STR,),
    "benchmarks/[*]/ddpbench/comm/mesh/[*]/size": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/mesh/[*]/bytes_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/mesh/[*]/collectives_per_step": (_NUM,),
    "benchmarks/[*]/ddpbench/comm/reduce_scatters_per_step": (_NUM, _NULL),
    "benchmarks/[*]/ddpbench/comm/all_gathers_per_step": (_NUM, _NULL),
}
# Fields that are times, sizes or rates: never negative. (Real times of measured entries must be
# above zero as well; the readers of samples check that.)
_NON_NEGATIVE = re.compile(r"^benchmarks/\[\*\]/(real_time|cpu_time|items_per_second|bytes|busbw|bytes_per_second"
                           r"|ddpbench/(step_times_ms/\[\*\]|world_size|global_batch|workload_facts/gradient_bytes"
                           r"|comm/bytes_per_step|comm/bucket_timeline/\[\*\]/(bytes|ready_ms|allreduce_ms|reduce_scatter_ms)|comm/units/\[\*\]/bytes"
                           r"|comm/(reduce_scatter|all_gather|bytes_sent)_(bytes_)?per_step|comm/(reduce_scatter|all_gather)_ms"
                           r"|memory/\[\*\]/(parameter|gradient|optimizer_state)_bytes))$")


def _check_tree(value, path, where):
    """Every number finite and below LARGEST, every field of _SCHEMA of its type, recursively."""
    if _is_number(value):
        if not math.isfinite(value) or abs(value) > LARGEST:
            raise ResultsError(f"{where}: {path or 'the document'} is {value!r}, not a usable number")
    expected = _SCHEMA.get(_pattern(path))
    if expected is not None and not any(_TYPES[t](value) for t in expected):
        raise ResultsError(f"{where}: {path} should be {' or '.join(expected)}, not {_json_type(value)}")
    if _is_number(value) and value < 0 and _NON_NEGATIVE.match(_pattern(path)):
        raise ResultsError(f"{where}: {path} is negative ({value!r})")
    if isinstance(value, dict):
        for k, v in value.items():
            _check_tree(v, f"{path}/{k}" if path else k, where)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _check_tree(v, f"{path}/{i}", where)


_INDEX = re.compile(r"/\d+(?=/|$)")


def _pattern(path):
    p = _INDEX.sub("/[*]", path)
    if p not in _SCHEMA:  # keys of free-form objects
        head, _, _ = p.rpartition("/")
        if head + "/*" in _SCHEMA:
            return head + "/*"
    return p


def _json_type(v):
    for name, check in _TYPES.items():
        if check(v):
            return name
    return type(v).__name__


def _refuse_constant(name):
    raise ResultsError(f"holds {name}, which JSON does not allow")


def load(path):
    """Returns the parsed document of a ddpbench results file, or raises ResultsError naming the file."""
    try:
        raw = files.read_regular_file(path)
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror or e}") from e
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ResultsError(f"{path}: not UTF-8 text (byte {e.start})") from e
    try:
        doc = json.loads(text, parse_constant=_refuse_constant)
    except ResultsError as e:
        raise ResultsError(f"{path}: {e}") from e
    except (json.JSONDecodeError, RecursionError) as e:
        raise ResultsError(f"{path}: not valid JSON: {str(e).splitlines()[0] if str(e) else 'too deeply nested'}") from e
    return validate(doc, path)


def is_micro(doc):
    """A ddpbench-micro file: Google Benchmark's own JSON, marked by a custom context key."""
    return "ddpbench_micro" in doc["context"]


def validate(doc, path="<document>"):
    if not isinstance(doc, dict) or not isinstance(doc.get("context"), dict) or not isinstance(
            doc.get("benchmarks"), list):
        raise ResultsError(f"{path}: not a ddpbench results file (needs a context object and a benchmarks array)")
    try:
        _check_tree(doc, "", path)
    except RecursionError as e:
        raise ResultsError(f"{path}: nested too deeply to be a results file") from e
    if is_micro(doc):
        for i, b in enumerate(doc["benchmarks"]):
            if "name" not in b or "run_type" not in b or "real_time" not in b:
                raise ResultsError(f"{path}: benchmarks[{i}] lacks name, run_type or real_time")
            _check_entry(b, i, path)
        return doc
    version = doc["context"].get("json_schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS or isinstance(version, bool):
        raise ResultsError(f"{path}: json_schema_version {version!r} is not one this reader knows "
                           f"({', '.join(map(str, KNOWN_SCHEMA_VERSIONS))})")
    if "ddpbench" not in doc["context"]:
        raise ResultsError(f"{path}: context.ddpbench is missing: written by another tool?")
    for i, b in enumerate(doc["benchmarks"]):
        if "name" not in b or "run_type" not in b or "real_time" not in b or "ddpbench" not in b:
            raise ResultsError(f"{path}: benchmarks[{i}] lacks name, run_type, real_time or ddpbench")
        fields = b["ddpbench"]
        missing = [k for k in ("workload", "strategy", "world_size", "status") if k not in fields]
        if missing:
            raise ResultsError(f"{path}: benchmarks[{i}].ddpbench lacks {', '.join(missing)}")
        if fields["status"] not in STATUSES:
            raise ResultsError(f"{path}: benchmarks[{i}].ddpbench.status {fields['status']!r} is not one of "
                               f"{', '.join(STATUSES)}")
        if fields["world_size"] < 1 or fields["world_size"] != int(fields["world_size"]):
            raise ResultsError(f"{path}: benchmarks[{i}].ddpbench.world_size {fields['world_size']!r} is no world size")
        _check_entry(b, i, path)
    return doc


def _check_entry(b, i, path):
    if b["run_type"] not in RUN_TYPES:
        raise ResultsError(f"{path}: benchmarks[{i}].run_type {b['run_type']!r} is not iteration or aggregate")
    if b.get("time_unit", "ns") not in TO_MS:
        raise ResultsError(f"{path}: benchmarks[{i}].time_unit {b['time_unit']!r} is not one of "
                           f"{', '.join(TO_MS)}")
    if "run_name" not in b and not isinstance(b["name"], str):
        raise ResultsError(f"{path}: benchmarks[{i}].name is not a string")


def dtype(doc):
    """The run's --dtype; files written before it existed ran fp32; None for a ddpbench-micro file."""
    if is_micro(doc):
        return None
    return doc["context"]["ddpbench"].get("settings", {}).get("dtype", "fp32")


def is_complete(doc):
    """False for what an interrupted or stopped run left (ddpbench-micro files are always whole)."""
    return is_micro(doc) or doc["context"]["ddpbench"].get("complete", True)


@dataclass
class CaseSamples:
    """One case of a results file as a comparison sees it."""
    name: str
    status: str = "ok"
    reason: str = ""
    repetition_ms: List[float] = field(default_factory=list)  # mean step time of each kept repetition
    # Each kept repetition's lower-quartile step (ms), what a comparison takes its interval over
    # (docs/ci.md: a shared machine only adds time to steps, in stretches); None where some
    # repetition lacks its step times (a ddpbench-micro file, a hand-made one).
    repetition_quartile_ms: Optional[List[float]] = field(default_factory=list)

    @property
    def measured(self):
        return self.status == "ok" and bool(self.repetition_ms)


def case_samples(doc, path="<document>"):
    """{case name: CaseSamples} in file order. ddpbench runs are keyed by run_name; ddpbench-micro
    files by benchmark name, as Google Benchmark's compare.py does. A case's status is sticky: a
    case that failed in any repetition is failed, whatever it kept."""
    out = OrderedDict()
    micro = is_micro(doc)
    for i, b in enumerate(doc["benchmarks"]):
        name = b.get("run_name", b["name"])
        if micro and b["run_type"] == "aggregate":
            continue  # Google Benchmark's mean/median/stddev of the iterations: derived, not samples
        case = out.setdefault(name, CaseSamples(name))
        if micro:
            if b.get("error_occurred"):
                case.status, case.reason = "failed", b.get("error_message", "")
        else:
            fields = b["ddpbench"]
            if fields["status"] != "ok" or case.status == "ok":
                case.status, case.reason = fields["status"], fields.get("reason") or b.get("error_message") or ""
        if b["run_type"] == "iteration" and not b.get("error_occurred") and case.status == "ok":
            ms = b["real_time"] * TO_MS[b.get("time_unit", "ns" if micro else "ms")]
            if not ms >= SHORTEST_MS:
                raise ResultsError(f"{path}: benchmarks[{i}].real_time is {b['real_time']!r}: no measured time "
                                   f"is that short")
            case.repetition_ms.append(ms)
            steps = [] if micro else b["ddpbench"].get("step_times_ms") or []
            if not steps or case.repetition_quartile_ms is None:
                case.repetition_quartile_ms = None
            else:
                quartile = stats.percentile(steps, 0.25)
                if not quartile >= SHORTEST_MS:
                    raise ResultsError(f"{path}: benchmarks[{i}].ddpbench.step_times_ms has a lower quartile of "
                                       f"{quartile!r} ms: no measured step is that short")
                case.repetition_quartile_ms.append(quartile)
    for case in out.values():
        if case.status != "ok":
            case.repetition_ms = []  # kept repetitions of a failed case are partial, never a result
            case.repetition_quartile_ms = []
    return out


def tflops_text(median_fields):
    """'12.3 (45% of peak)' from a median entry's compute object, '-' where it has none."""
    compute = median_fields.get("compute") or {}
    achieved = compute.get("achieved_tflops")
    if achieved is None:
        return "-"
    text = f"{achieved:.3g}"
    if compute.get("fraction_of_peak") is not None and compute.get("peak_tflops") is not None:
        text += f" ({compute['fraction_of_peak'] * 100:.0f}% of {compute['peak_tflops']:.4g})"
    return text


def medians(doc):
    """{run_name: median aggregate entry} for every case that was measured."""
    return {b.get("run_name", b["name"]): b for b in doc["benchmarks"]
            if b["run_type"] == "aggregate" and b.get("aggregate_name") == "median"}
