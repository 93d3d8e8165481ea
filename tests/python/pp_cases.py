"""Synthetic measured pp cases and a two-link network for the pp projection's tests
(test_projection_pipeline.py, test_projection_mesh.py): units' profiled times, the cut, memory by kind."""
from projection import model, network

GBPS, US, MS = 1e9, 1e-6, 1e-3


def net(devices_per_node=8, intra_gbps=100.0, intra_us=2.0, inter_gbps=10.0, inter_us=10.0):
    return network.Network(name="test", devices_per_node=devices_per_node,
                           intra=network.Link(intra_gbps * GBPS, intra_us * US),
                           inter=network.Link(inter_gbps * GBPS, inter_us * US))


def pp_case(unit_ms, stage_units, microbatches, batch=64, schedule="1f1b", sent=0.0, optimizer_ms=0.0,
            balance="time", unit_parameters=None, memory=None, busy_ms=None):
    """A measured pp case whose stages computed exactly their profile (calibration 1)."""
    stages = len(stage_units)
    unit_parameters = unit_parameters or [1000] * len(unit_ms)
    stage_ms = [sum(unit_ms[b:e]) for b, e in stage_units]
    stage_parameters = [sum(unit_parameters[b:e]) for b, e in stage_units]
    busy = busy_ms or [microbatches * s + optimizer_ms * stage_parameters[r] / stage_parameters[0]
                       for r, s in enumerate(stage_ms)]
    line = {"schedule": schedule, "stages": stages, "microbatches": microbatches, "balance": balance,
            "stage_units": [list(s) for s in stage_units], "stage_parameters": stage_parameters,
            "unit_parameters": unit_parameters, "unit_profile_ms": unit_ms if balance == "time" else None,
            "compute_ms_by_rank": busy}
    phases = {"forward": microbatches * stage_ms[0] / 3 * MS, "backward": microbatches * stage_ms[0] * 2 / 3 * MS,
              "optimizer": optimizer_ms * MS, "data": 0.0, "residual": 0.0}
    return model.MeasuredCase(name=f"w/pp/world:{stages}", workload="w", strategy="pp", world=stages,
                              global_batch=batch, phases=phases, gradient_bytes=None, buckets=None,
                              step_s=sum(busy) / stages * MS, memory=memory, pipeline=line,
                              point_to_point_bytes=sent)
