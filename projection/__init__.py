"""Projection: what a measured ddpbench workload will do at world sizes and on networks it did not run on.

network.py     links and machines as data: presets with their sources, files, fits to measured all-reduce times
link_run.py    the inter-node link's efficiency range widened to what a ddpbench run across nodes reached (--link-run)
collectives.py the cost of an all-reduce, broadcast or reduce under an alpha-beta model (ring and tree, NCCL's way),
               and a shaped link's token bucket
slowdown.py    compute slowed by communication: backward's factor and the CPU's cost per byte sent, fitted or stated
cases.py       the measured cases a results file holds, and the Projection of one strategy at one world size
model.py       per-strategy step time from one measured case: ddp replays the measured bucket timeline
pipeline.py    pp at another stage count: the chain cut again, the schedule played with the measured unit times
pipeline_schedule.py  pipeline/schedule.cpp's four schedules, played with per-stage times and a hop between ranks
tensor_parallel.py  tp at another group size: the share of compute its split divides, its all-reduces over the group
memory.py      memory per device by ZeRO's formulas over a measured case's bytes
timelines.py   a step's collectives on one stream behind compute, with a shaped link's token bucket
answers.py     which strategies fit a device's memory, the fastest of them, and when the band cannot rank two
cli.py         scripts/ddpbench-project: table, JSON and chart

docs/projection.md gives the model, its assumptions and where it is known to be wrong.
"""
