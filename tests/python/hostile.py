"""Hypothesis strategies for malformed, hostile and extreme results files, grown from real ones.

A fuzzed file starts as a real ddpbench (or ddpbench-micro) document and takes a few mutations: a
field replaced by a hostile or extreme value, a key removed, an entry duplicated, the text cut
short or broken into bytes that are not UTF-8. The scripts must answer each with an exit code and
at most a one-line message, never a traceback.
"""
import copy
import json
import math

from hypothesis import strategies as st

HOSTILE_STRINGS = ["", "$x^$", "$\\frac{", "a|b", "<script>alert(1)</script>", "&amp;", "\n\r\t", "\x00\x1b[31m",
                   "é" * 3, "\ud7ff", "x" * 5000, "../../etc/passwd", "%s%n", "{}", "1e308", "NaN"]
EXTREME_NUMBERS = [0, -1, -0.0, 1e-300, 5e-324, 1e308, -1e308, 1e18, 1e19, 2 ** 63, -(2 ** 63), 0.5, 3, 1e-9, 7]

hostile_values = st.one_of(
    st.sampled_from(HOSTILE_STRINGS), st.sampled_from(EXTREME_NUMBERS), st.booleans(), st.none(),
    st.just({}), st.just([]), st.just([None]), st.just({"": None}),
    st.floats(allow_nan=False, allow_infinity=False), st.integers(), st.text(max_size=20))


def _paths(doc, prefix=()):
    """Every (container, key) pair in the document, the root's children first."""
    out = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for k, v in items:
        out.append((prefix + (k,)))
        out.extend(_paths(v, prefix + (k,)))
    return out


def _parent(doc, path):
    for k in path[:-1]:
        doc = doc[k]
    return doc


@st.composite
def mutated_document(draw, base):
    """A real document with one to four mutations."""
    doc = copy.deepcopy(base)
    for _ in range(draw(st.integers(1, 4))):
        paths = _paths(doc)
        if not paths:
            break
        path = draw(st.sampled_from(paths))
        parent = _parent(doc, path)
        action = draw(st.sampled_from(["replace", "replace", "replace", "delete", "duplicate"]))
        if action == "replace":
            parent[path[-1]] = draw(hostile_values)
        elif action == "delete":
            if isinstance(parent, dict):
                del parent[path[-1]]
            else:
                parent.pop(path[-1])
        elif isinstance(parent, list):
            parent.append(copy.deepcopy(parent[path[-1]]))
    return doc


def _dump(doc):
    """JSON text as Python writes it, which also writes NaN and Infinity for non-finite floats."""
    return json.dumps(doc, allow_nan=True)


@st.composite
def hostile_file_bytes(draw, bases):
    """The bytes of a results file: a mutated real document, or one cut short or made not UTF-8."""
    base = draw(st.sampled_from(bases))
    text = _dump(draw(mutated_document(base)))
    shape = draw(st.sampled_from(["whole", "whole", "whole", "cut", "bytes", "nan", "scaled"]))
    if shape == "cut":
        return text[: draw(st.integers(0, len(text)))].encode("utf-8")
    if shape == "bytes":
        raw = bytearray(text.encode("utf-8"))
        at = draw(st.integers(0, max(0, len(raw) - 1)))
        raw[at:at] = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x00"]))
        return bytes(raw)
    if shape == "nan":
        return text.replace('"real_time": ', '"real_time": NaN, "x": ', 1).encode("utf-8")
    if shape == "scaled":  # every time of every entry multiplied: extreme but well formed
        factor = draw(st.sampled_from([0.0, -1.0, 1e-300, 1e300, math.pi]))
        doc = json.loads(text)
        benchmarks = doc.get("benchmarks") if isinstance(doc, dict) else None
        for b in benchmarks if isinstance(benchmarks, list) else []:
            if isinstance(b, dict) and isinstance(b.get("real_time"), (int, float)):
                b["real_time"] = b["real_time"] * factor
        return _dump(doc).encode("utf-8")
    return text.encode("utf-8")
