"""Projection: what a measured ddpbench workload will do at world sizes and on networks it did not run on.

network.py     links and machines as data: presets with their sources, files, fits to measured all-reduce times
collectives.py the cost of an all-reduce, broadcast or reduce under an alpha-beta model (ring and tree, NCCL's way)
model.py       per-strategy step time from one measured case: ddp replays the measured bucket timeline
cli.py         scripts/ddpbench-project: table, JSON and chart

docs/projection.md gives the model, its assumptions and where it is known to be wrong.
"""
