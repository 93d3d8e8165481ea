"""The cost of one collective under an alpha-beta model, in the structure of NCCL's own tuner.

An all-reduce of S bytes over W ranks on N nodes of G devices:
- ring: 2 (W - 1) steps, of which 2 (N - 1) cross the network; each rank moves 2 (W - 1) / W * S
  bytes at the bus bandwidth, the slower of the intra-node link and the node's NICs together
  (one ring per NIC, NCCL's channels): busbw = min(B_intra, NICs * B_nic).
- tree (only between nodes, NCCL's double binary tree with a chain inside each node): latency
  2 ((G - 1) alpha_intra + ceil(log2 N) alpha_inter); bandwidth half the bus bandwidth (NCCL's
  algorithm-bandwidth ratio for trees), so 2 S / busbw.
NCCL picks the cheaper per call; so does this. Both add the fixed cost of a collective. Every
bandwidth is the link's achievable one: its nominal figure times its efficiency (network.Link).

A reduce-scatter or all-gather of S bytes (the whole buffer; each rank ends with, or starts from,
S / W) is NCCL's ring: W - 1 steps, N - 1 of them across the network, each rank moving
(W - 1) / W * S bytes at the bus bandwidth, half an all-reduce's traffic.
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    seconds: float
    algorithm: str  # "ring", "tree", "none" (one rank)


def nodes_for(world, devices_per_node):
    return max(1, math.ceil(world / devices_per_node))


def bus_bandwidth(network, world):
    """Bytes/s each rank's share of a ring moves at: the intra link, or the NICs when the ring leaves the node."""
    if nodes_for(world, network.devices_per_node) == 1:
        return network.intra.achievable
    return min(network.intra.achievable, network.nics_per_node * network.inter.achievable)


def allreduce(network, nbytes, world):
    if world <= 1:
        return Cost(0.0, "none")
    nodes = nodes_for(world, network.devices_per_node)
    per_node = min(world, network.devices_per_node)
    busbw = bus_bandwidth(network, world)
    inter_steps = 2 * (nodes - 1)
    ring = (network.base_latency + (2 * (world - 1) - inter_steps) * network.intra.alpha
            + inter_steps * network.inter.alpha + 2 * (world - 1) / world * nbytes / busbw)
    if nodes == 1:
        return Cost(ring, "ring")
    tree = (network.base_latency + 2 * ((per_node - 1) * network.intra.alpha
                                        + math.ceil(math.log2(nodes)) * network.inter.alpha) + 2 * nbytes / busbw)
    return Cost(tree, "tree") if tree < ring else Cost(ring, "ring")


def broadcast(link, nbytes, world, base_latency=0.0):
    """One device's bytes to W - 1 others, pipelined along a chain (DataParallel's replicate)."""
    if world <= 1:
        return Cost(0.0, "none")
    return Cost(base_latency + (world - 1) * link.alpha + nbytes / link.achievable, "chain")


def reduce(link, nbytes, world, base_latency=0.0):
    """W devices' bytes summed onto one, pipelined along a chain (DataParallel's gradient reduce)."""
    return broadcast(link, nbytes, world, base_latency)


def _ring_half(network, nbytes, world):
    nodes = nodes_for(world, network.devices_per_node)
    inter_steps = nodes - 1
    return (network.base_latency + (world - 1 - inter_steps) * network.intra.alpha + inter_steps * network.inter.alpha
            + (world - 1) / world * nbytes / bus_bandwidth(network, world))


def reduce_scatter(network, nbytes, world):
    """nbytes summed over the ranks, each keeping its 1/W (ZeRO-2's gradients, FSDP's backward)."""
    if world <= 1:
        return Cost(0.0, "none")
    return Cost(_ring_half(network, nbytes, world), "ring")


def all_gather(network, nbytes, world):
    """Each rank's 1/W of nbytes to every rank (ZeRO's updated parameters, FSDP's units)."""
    if world <= 1:
        return Cost(0.0, "none")
    return Cost(_ring_half(network, nbytes, world), "ring")
