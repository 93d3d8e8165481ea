"""Synthetic measured cases and a two-link network for the tp projection's tests
(test_projection_tp.py, test_projection_mesh.py): phases in ms, memory by kind, tp's collectives."""
from projection import model, network

GBPS, US, MS, MIB = 1e9, 1e-6, 1e-3, 2 ** 20


def net(devices_per_node=8, nics=1):
    return network.Network(name="test", devices_per_node=devices_per_node, nics_per_node=nics,
                           intra=network.Link(100 * GBPS, 2 * US), inter=network.Link(10 * GBPS, 10 * US))


def case(strategy, world, forward_ms, backward_ms, optimizer_ms=1.0, comm_ms=0.0, params=1000.0, other=50.0,
         collectives_a_step=None, comm_bytes=None, reduce_scatters=None, all_gathers=None):
    phases = {"forward": forward_ms * MS, "backward": backward_ms * MS, "optimizer": optimizer_ms * MS,
              "data": 0.5 * MS, "residual": 0.1 * MS}
    if comm_ms:
        phases["comm_exposed"] = comm_ms * MS
    return model.MeasuredCase(name=f"w/{strategy}/world:{world}", workload="w", strategy=strategy, world=world,
                              global_batch=32, phases=phases, gradient_bytes=None, buckets=None,
                              step_s=sum(phases.values()), comm_bytes_per_step=comm_bytes,
                              comm_collectives=collectives_a_step, reduce_scatters=reduce_scatters,
                              all_gathers=all_gathers,
                              memory={"parameter_bytes": params, "gradient_bytes": params,
                                      "optimizer_state_bytes": 2 * params, "other_bytes": other})
