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

A link behind a shaper's token bucket (Link.burst_bytes) lets a collective that follows an idle gap
send what the bucket holds at the speed under the shaper: ShapedLink keeps the bucket along a
strategy's timeline.
"""
import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Cost:
    seconds: float
    algorithm: str  # "ring", "tree", "none" (one rank)
    # The part of `seconds` spent at the inter-node link's rate (the bandwidth term where the NICs
    # are the ring's bottleneck): what a shaper's bucket can shorten.
    shaped_s: float = 0.0


class ShapedLink:
    """The inter-node link's token bucket along one rank's timeline, in seconds of the link's nominal
    rate (tc tbf counts every byte it sends, so a bucket of B bytes is worth B / rate of sending at
    the rate, payload and headers alike). It fills while the link idles and empties as a collective
    sends; a collective's bandwidth term is shortened by what it holds. One NIC's bucket per ring:
    with several NICs each carries its share of the bytes through a bucket of its own, in parallel.
    A link with no bucket (burst_bytes 0, every NIC) changes nothing."""

    def __init__(self, network, world, idle_before_s):
        link = network.inter
        shaped = nodes_for(world, network.devices_per_node) > 1 and link.burst_bytes > 0
        self.capacity_s = link.burst_bytes / link.bandwidth if shaped else 0.0
        self.held_s = min(self.capacity_s, max(0.0, idle_before_s))

    def idle(self, seconds):
        """The link idled this long: the bucket refills at the rate, up to its size."""
        self.held_s = min(self.capacity_s, self.held_s + max(0.0, seconds))

    def send(self, cost):
        """The collective's seconds, less what the bucket sends of its bandwidth term."""
        used = min(self.held_s, cost.shaped_s)
        self.held_s -= used
        return cost.seconds - used


def nodes_for(world, devices_per_node):
    return max(1, math.ceil(world / devices_per_node))


def bus_bandwidth(network, world):
    """Bytes/s each rank's share of a ring moves at: the intra link, or the NICs when the ring leaves the node."""
    if nodes_for(world, network.devices_per_node) == 1:
        return network.intra.achievable
    return min(network.intra.achievable, network.nics_per_node * network.inter.achievable)


def _shaped(network, world, bandwidth_s):
    """The bandwidth term's part at the inter-node link's rate: all of it where the NICs are the
    bottleneck of a ring that leaves the node, else none."""
    if nodes_for(world, network.devices_per_node) == 1:
        return 0.0
    return bandwidth_s if network.nics_per_node * network.inter.achievable <= network.intra.achievable else 0.0


def allreduce(network, nbytes, world):
    if world <= 1:
        return Cost(0.0, "none")
    nodes = nodes_for(world, network.devices_per_node)
    per_node = min(world, network.devices_per_node)
    busbw = bus_bandwidth(network, world)
    inter_steps = 2 * (nodes - 1)
    ring_bytes_s = 2 * (world - 1) / world * nbytes / busbw
    ring = (network.base_latency + (2 * (world - 1) - inter_steps) * network.intra.alpha
            + inter_steps * network.inter.alpha + ring_bytes_s)
    if nodes == 1:
        return Cost(ring, "ring")
    tree_bytes_s = 2 * nbytes / busbw
    tree = (network.base_latency + 2 * ((per_node - 1) * network.intra.alpha
                                        + math.ceil(math.log2(nodes)) * network.inter.alpha) + tree_bytes_s)
    if tree < ring:
        return Cost(tree, "tree", _shaped(network, world, tree_bytes_s))
    return Cost(ring, "ring", _shaped(network, world, ring_bytes_s))


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
    bytes_s = (world - 1) / world * nbytes / bus_bandwidth(network, world)
    return Cost(network.base_latency + (world - 1 - inter_steps) * network.intra.alpha
                + inter_steps * network.inter.alpha + bytes_s, "ring", _shaped(network, world, bytes_s))


def reduce_scatter(network, nbytes, world):
    """nbytes summed over the ranks, each keeping its 1/W (ZeRO-2's gradients, FSDP's backward)."""
    if world <= 1:
        return Cost(0.0, "none")
    return _ring_half(network, nbytes, world)


def all_gather(network, nbytes, world):
    """Each rank's 1/W of nbytes to every rank (ZeRO's updated parameters, FSDP's units)."""
    if world <= 1:
        return Cost(0.0, "none")
    return _ring_half(network, nbytes, world)
