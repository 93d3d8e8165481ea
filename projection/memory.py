"""Memory per device of ddp and the sharded strategies at another world size, from one measured case:
ZeRO's formulas (SHARDED.md) over the whole model's parameter, gradient and optimizer bytes (the
measured case's per-device bytes times what it sharded them by), plus the measured rest of the peak
(activations, buffers, a gathered unit) as it was.
"""


# What each strategy divides by the world size: (parameters, gradients, optimizer state).
SHARDS = {"zero1": (False, False, True), "zero2": (False, True, True), "fsdp": (True, True, True)}


def whole_model_bytes(case):
    """(parameters, gradients, optimizer state) of the whole model and the measured rest, in bytes,
    from the measured case's device 0, or None where the file does not split its memory by kind."""
    if not case.memory:
        return None
    sharded = SHARDS.get(case.strategy, (False, False, False))
    kinds = ("parameter_bytes", "gradient_bytes", "optimizer_state_bytes")
    whole = [case.memory[k] * (case.world if s else 1) for k, s in zip(kinds, sharded)]
    return whole + [case.memory["other_bytes"]]


def memory_per_device(case, strategy, world, activation_change=0.0):
    """ZeRO's formulas at `world` over the case's whole-model bytes, plus the measured rest: the
    case's own where it ran `strategy`. A case of another strategy (`single`) holds none of the
    strategy's communication buffers: ddp's gradient buckets (a whole copy of the gradients) are
    added to its rest; zero1's and zero2's (full gradient buckets during backward, the collectives'
    buffers) are not assumed, and their memory is not projected (None): measured, they came out
    25-38% over single's rest plus the formulas (issue 43). `activation_change`: what the
    activations per device change by against the case's (a smaller per-device batch under strong
    scaling), taken to change the rest of the peak by as much (activations.py)."""
    parts = whole_model_bytes(case)
    if parts is None:
        return None
    rest = parts[3]
    if case.strategy != strategy:
        if strategy != "ddp":
            return None
        rest += parts[1]
    sharded = SHARDS.get(strategy, (False, False, False))
    held = sum(b / world if s else b for b, s in zip(parts[:3], sharded))
    return held + max(0.0, rest + activation_change)


def memory_assumption(case, strategy):
    """What the memory column assumes, where it is projected from a case of another strategy."""
    if case.strategy == strategy or whole_model_bytes(case) is None:
        return None
    if strategy == "ddp":
        return f"ddp memory: {case.name}'s, plus ddp's gradient buckets (a whole copy of the gradients)"
    return (f"{strategy} memory: not projected from {case.name}, which holds none of {strategy}'s gradient "
            f"buckets; measure {strategy} once, at any world, to project it")
