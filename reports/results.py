"""Reading ddpbench results files: the one place that knows the JSON contract's version.

Readers refuse a schema version they do not know rather than misread it (nvbench's habit).
"""
import json

# The versions of context.json_schema_version this package understands.
KNOWN_SCHEMA_VERSIONS = (1,)


class ResultsError(ValueError):
    """A results file that cannot be used: unreadable, malformed or of an unknown schema."""


def load(path):
    """Returns the parsed document of a ddpbench results file, or raises ResultsError naming the file."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except OSError as e:
        raise ResultsError(f"{path}: cannot read: {e.strerror}") from e
    except json.JSONDecodeError as e:
        raise ResultsError(f"{path}: not valid JSON: {e}") from e
    return validate(doc, path)


def is_micro(doc):
    """A ddpbench-micro file: Google Benchmark's own JSON, marked by a custom context key."""
    return "ddpbench_micro" in doc["context"]


def validate(doc, path="<document>"):
    if not isinstance(doc, dict) or not isinstance(doc.get("context"), dict) or not isinstance(
            doc.get("benchmarks"), list):
        raise ResultsError(f"{path}: not a ddpbench results file (needs a context object and a benchmarks array)")
    if is_micro(doc):
        for i, b in enumerate(doc["benchmarks"]):
            if not isinstance(b, dict) or "name" not in b or "run_type" not in b or "real_time" not in b:
                raise ResultsError(f"{path}: benchmarks[{i}] lacks name, run_type or real_time")
        return doc
    version = doc["context"].get("json_schema_version")
    if version not in KNOWN_SCHEMA_VERSIONS:
        raise ResultsError(f"{path}: json_schema_version {version!r} is not one this reader knows "
                           f"({', '.join(map(str, KNOWN_SCHEMA_VERSIONS))})")
    if "ddpbench" not in doc["context"]:
        raise ResultsError(f"{path}: context.ddpbench is missing: written by another tool?")
    for i, b in enumerate(doc["benchmarks"]):
        if not isinstance(b, dict) or "name" not in b or "run_type" not in b or "ddpbench" not in b:
            raise ResultsError(f"{path}: benchmarks[{i}] lacks name, run_type or ddpbench")
    return doc


def dtype(doc):
    """The run's --dtype; files written before it existed ran fp32."""
    return doc["context"]["ddpbench"].get("settings", {}).get("dtype", "fp32")


def tflops_text(median_fields):
    """'12.3 (45% of peak)' from a median entry's compute object, '-' where it has none."""
    compute = median_fields.get("compute") or {}
    achieved = compute.get("achieved_tflops")
    if achieved is None:
        return "-"
    text = f"{achieved:.3g}"
    if compute.get("fraction_of_peak") is not None:
        text += f" ({compute['fraction_of_peak'] * 100:.0f}% of {compute['peak_tflops']:.4g})"
    return text


def medians(doc):
    """{run_name: median aggregate entry} for every case that was measured."""
    return {b["run_name"]: b for b in doc["benchmarks"]
            if b["run_type"] == "aggregate" and b.get("aggregate_name") == "median"}
