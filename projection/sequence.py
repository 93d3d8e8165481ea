"""Cases measured at one sequence length, read at another (`ddpbench-project --seq-len T`), from the
workload facts the file records (docs/projection.md, "Sequence length").

A sequence model's step grows with its tokens a sample S in two ways: most of it linearly (every
token's projections, MLPs and LayerNorms), attention's scores as S squared. The file's
`workload_facts` say which part is which, so one measured length is enough:
- compute (forward, backward, checkpointing's recompute, and ddp's bucket ready times with them):
  in proportion to the FLOPs, `attention_flops_per_sample` of them growing as S squared and the
  rest linearly;
- the data phase linearly (tokens to move);
- activations: `fixed_activation_bytes` whatever S and the batch (gpt2's fused loss keeps its output
  weight's gradient), `attention_score_bytes_per_sample` (plain attention's softmax output; 0 under
  sdpa) as S squared, of the units --activation-checkpointing did not checkpoint, the rest linearly;
  and the rest of the peak changes by as much as they do, as under the batch's scaling;
- the optimizer, ddp's unpacking, the gradients and their traffic as measured: they follow the
  parameters, which a longer sequence does not change (gpt2's position table aside: it is sized to
  the model's context, `max_tokens_per_sample`, whatever the run's length).
pp sends activations between stages and tp all-reduces them, and both keep figures per chain unit:
those are not read at another length yet, and are refused with a reason.
"""
import dataclasses

from projection.activations import micro_batch
from projection.cases import ProjectionError

# Strategies whose every figure this module rescales; pp and tp are refused (above).
NOT_RESCALED = ("pp", "tp")


@dataclasses.dataclass
class SequenceScale:
    """One workload's reading at another length: measured and target tokens, and the factors."""
    workload: str
    measured: int
    target: int
    compute: float   # FLOPs at the target over FLOPs as measured, a sample
    linear: float    # target over measured

    def describe(self):
        return (f"--seq-len: {self.workload} measured at {self.measured} tokens a sample, read at {self.target}: "
                f"compute x{self.compute:.3g} (its FLOPs a sample: attention's scores as the square of the tokens, "
                f"the rest linearly; time taken in proportion, though longer sequences' larger products may run "
                f"nearer the peak), the data phase x{self.linear:.3g}, activations from the workload's facts (a "
                f"fixed part, attention's kept scores as the square, the rest linearly) and the rest of the peak "
                f"changed by as much; the optimizer and the gradients' traffic as measured")


def _facts(case):
    f = case.facts or {}
    return {k: float(f.get(k) or 0.0) for k in ("tokens_per_sample", "max_tokens_per_sample", "flops_per_sample",
                                                "attention_flops_per_sample", "attention_score_bytes_per_sample",
                                                "fixed_activation_bytes")}


def why_not(case, tokens):
    """Why `case`'s workload cannot be read at `tokens` tokens a sample, or None."""
    f = _facts(case)
    if "tokens_per_sample" not in (case.facts or {}):
        return "its file records no tokens_per_sample (a ddpbench from before --seq-len projections): measure it again"
    if f["tokens_per_sample"] <= 0:
        return "it has no sequence"
    if tokens > f["max_tokens_per_sample"]:
        return (f"its model takes {f['max_tokens_per_sample']:.0f} tokens a sample at most (its position table)"
                if f["max_tokens_per_sample"] != f["tokens_per_sample"] else
                f"it runs at its own {f['tokens_per_sample']:.0f} tokens a sample only")
    if f["flops_per_sample"] <= 0:
        return "its file records no FLOPs a sample to scale compute by"
    return None


def scale_for(case, tokens):
    f = _facts(case)
    s = tokens / f["tokens_per_sample"]
    flops, attention = f["flops_per_sample"], f["attention_flops_per_sample"]
    return SequenceScale(case.workload, int(f["tokens_per_sample"]), tokens,
                         ((flops - attention) * s + attention * s * s) / flops, s)


def kept_scores_share(case):
    """The share of the attention scores a case's forward kept: all of them, none under
    --activation-checkpointing full (a checkpointed unit keeps its input and recomputes the rest),
    and under every:N those of the units not checkpointed, taken as 1 - 1/N of them (the N-th,
    2N-th, ... are; exact where N divides the units)."""
    policy = str(case.levers.get("activation_checkpointing") or "none")
    if policy == "none":
        return 1.0
    if policy.startswith("every:") and policy[len("every:"):].isdigit() and int(policy[len("every:"):]) > 0:
        return 1.0 - 1.0 / int(policy[len("every:"):])
    return 0.0


def activations_at(case, scale):
    """`case`'s activation bytes at the target length: its fixed part as it is, its kept scores (a
    sample, times its micro-batch) by the square of the lengths' ratio, the rest by the ratio."""
    f = _facts(case)
    fixed = min(f["fixed_activation_bytes"], case.activation_bytes)
    scores = f["attention_score_bytes_per_sample"] * micro_batch(case) * kept_scores_share(case)
    rest = max(0.0, case.activation_bytes - fixed - scores)
    return fixed + rest * scale.linear + scores * scale.linear ** 2


def rescale(case, scale):
    """A copy of `case` as if measured at `scale.target` tokens a sample (the module's rules)."""
    c = dataclasses.replace(case, phases=dict(case.phases), memory=dict(case.memory) if case.memory else None)
    for name in ("forward", "backward"):
        if name in c.phases:
            c.phases[name] *= scale.compute
    if "data" in c.phases:
        c.phases["data"] *= scale.linear
    c.recompute_s = case.recompute_s * scale.compute
    if case.buckets:
        c.buckets = [dataclasses.replace(b, ready_s=b.ready_s * scale.compute) for b in case.buckets]
    c.step_s = case.step_s + sum(c.phases.values()) - sum(case.phases.values())
    if case.activation_bytes is not None:
        c.activation_bytes = activations_at(case, scale)
        if c.memory is not None:
            c.memory["other_bytes"] = max(0.0, c.memory["other_bytes"] + c.activation_bytes - case.activation_bytes)
    return c


def at_tokens(cases, tokens, flag="--seq-len"):
    """`cases` read at `tokens` tokens a sample: (the cases, {workload: SequenceScale} of those
    rescaled, {workload: why not} of those kept as measured). pp and tp cases of a rescaled workload
    are left out (the caller refuses them). A ProjectionError where no workload can be rescaled."""
    scales, kept = {}, {}
    for case in cases:
        if case.workload in scales or case.workload in kept:
            continue
        reason = why_not(case, tokens)
        if reason is None:
            scales[case.workload] = scale_for(case, tokens)
        else:
            kept[case.workload] = reason
    if not scales:
        raise ProjectionError(f"{flag} {tokens}: no workload of the file can be read at it ("
                              + "; ".join(f"{w}: {why}" for w, why in kept.items()) + ")")
    out = []
    for case in cases:
        scale = scales.get(case.workload)
        if scale is None:
            out.append(case)
        elif case.strategy not in NOT_RESCALED:
            out.append(rescale(case, scale))
    return out, scales, kept


def refusal(strategy, scale):
    """The reason a pp or tp projection of a rescaled workload is refused."""
    what = {"pp": "its stage-to-stage sends and its chain units' times",
            "tp": "its all-reduced activations and its measured rest of the peak"}[strategy]
    return (f"--seq-len {scale.target}: {strategy} is not read at another sequence length yet ({what} grow with the "
            f"tokens and are not modelled so); project it at the measured {scale.measured}")
