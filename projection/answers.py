"""Answers to "which strategy fits in a device's memory, and which of those is fastest", from a
file's projections: one line per workload and world, saying where the projection's band cannot
rank two strategies. Uses only the Projection records (model.py); prints nothing itself."""
from projection.activations import LEVERS_NOTE


def format_bytes(nbytes):
    """1.49 GiB, 980 MiB, 12 KiB."""
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes:.0f} B"


def fit_answers(projections, device_memory):
    """Per workload and world: which of the strategies whose memory is projected fit in
    `device_memory` bytes a device, and the fastest of those. One line each."""
    lines = []
    for workload, world in dict.fromkeys((p.workload, p.world) for p in projections):
        rows = [p for p in projections if (p.workload, p.world) == (workload, world) and p.status == "projected"
                and p.memory_per_device_bytes is not None]
        if not rows:
            continue
        fits = sorted((p for p in rows if p.memory_per_device_bytes <= device_memory),
                      key=lambda p: -p.samples_per_second)
        over = sorted((p for p in rows if p.memory_per_device_bytes > device_memory),
                      key=lambda p: p.memory_per_device_bytes)
        size = lambda p: f"{p.strategy} ({format_bytes(p.memory_per_device_bytes)})"  # noqa: E731
        head = f"{workload} at world {world}: "
        budget = f"{format_bytes(device_memory)} a device"
        levered = [t for t in (with_lever(p, device_memory) for p in over) if t]
        if not fits:
            lines.append(head + f"nothing fits in {budget}; the least: {size(over[0])}"
                         + ("; with a memory lever: " + ", ".join(levered) if levered else ""))
            continue
        best = fits[0]
        text = head + (f"fastest that fits in {budget}: {best.strategy} ({best.samples_per_second:.4g} samples/s, "
                       f"{format_bytes(best.memory_per_device_bytes)})")
        if len(fits) > 1:
            text += "; also fit: " + ", ".join(
                f"{size(p)} at {p.samples_per_second / best.samples_per_second:.2f}x" for p in fits[1:])
        if over:
            text += "; do not fit: " + ", ".join(size(p) for p in over)
        if levered:
            text += "; with a memory lever: " + ", ".join(levered)
        close = [p.strategy for p in fits[1:] if bands_overlap(best, p)]
        if close:
            text += (f"; {' or '.join([best.strategy] + close)}: within the projection's band of each other, "
                     f"the ranking cannot be told")
        lines.append(text)
    if any(" with a memory lever: " in line for line in lines):
        lines.append(LEVERS_NOTE)
    return lines


def with_lever(p, device_memory):
    """Of p's levers that bring it into `device_memory`, the fastest where projected (checkpointing's
    recompute against accumulation's assumption), then the fewest micro-batches (their order), in
    words, or None: "ddp --grad-accum 4 (71 GiB, activations 30 GiB -> 8 GiB; 812 samples/s if ...)"."""
    fitting = [lever for lever in p.levers or [] if lever["memory_per_device_bytes"] <= device_memory]
    if not fitting:
        return None
    lever = min(fitting, key=lambda lever: -(lever["throughput"] or 0.0))  # min keeps the first of equals
    return (f"{p.strategy} {lever['lever']} ({format_bytes(lever['memory_per_device_bytes'])}, activations "
            f"{format_bytes(p.activation_bytes)} -> {format_bytes(lever['activation_bytes'])}; {lever['cost']})")


def bands_overlap(a, b):
    """Whether two projections' throughput bands share any value: then which is faster cannot be told."""
    if not a.samples_per_second_band or not b.samples_per_second_band:
        return False
    (a_low, a_high), (b_low, b_high) = a.samples_per_second_band, b.samples_per_second_band
    return a_low <= b_high and b_low <= a_high
