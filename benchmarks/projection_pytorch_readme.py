#!/usr/bin/python3
"""A sanity check of ddpbench-project against numbers it did not measure: the scaling table that
PyTorch's DDP benchmark publishes in benchmarks/distributed/ddp/README.md (ResNet-50, batch 32 per
GPU, DGX-1 machines with 8 V100s on NVLink 2 and 4x 100 Gb/s InfiniBand each, NCCL, PyTorch 1.4).

Input, all from that README or stated here:
- the measured step: its "1 GPUs -- 1M/1G" p50 (DDP on one GPU), 0.100 s, of which 0.003 s is DDP's
  own work (against "no ddp", 0.097 s) and the rest forward and backward, split 1:2 (the usual
  ratio for a convolutional network; the README does not give it);
- ResNet-50's 25,557,032 parameters (torchvision), fp32 gradients, DDP's default buckets assumed
  ready evenly through backward;
- the network: presets nvlink2 + edr100 (4 NICs a node), datasheet figures.
Weak scaling, as the README's runs (32 a GPU). Prints predicted against published p50 step time.

    /usr/bin/python3 benchmarks/projection_pytorch_readme.py [--markdown]
"""
import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from projection import model, network  # noqa: E402

# benchmarks/distributed/ddp/README.md, "Benchmark: resnet50 with batch size 32", p50 sec/iter.
PUBLISHED = {1: 0.100, 2: 0.103, 4: 0.103, 8: 0.104, 16: 0.104}
NO_DDP = 0.097
RESNET50_PARAMETERS = 25_557_032


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--markdown", action="store_true")
    args = p.parse_args()
    compute = NO_DDP
    case = model.MeasuredCase(name="resnet50/ddp/world:1 (PyTorch README)", workload="resnet50", strategy="ddp",
                              world=1, global_batch=32,
                              phases={"forward": compute / 3, "backward": compute * 2 / 3,
                                      "reduce": PUBLISHED[1] - NO_DDP},
                              gradient_bytes=RESNET50_PARAMETERS * 4.0, buckets=None, step_s=PUBLISHED[1])
    net = network.load("nvlink2+edr100")
    projector = model.Projector(net, "weak")
    rows = []
    for world, published in PUBLISHED.items():
        pr = projector.ddp(case, world)
        rows.append((world, pr.nodes, pr.step_ms, published * 1e3, pr.step_ms / (published * 1e3) - 1,
                     pr.exposed_comm_ms))
    if args.markdown:
        print("| GPUs | nodes | predicted s/iter | published p50 | error | predicted exposed comm |")
        print("|---:|---:|---:|---:|---:|---:|")
        for w, n, pred, pub, err, exp in rows:
            print(f"| {w} | {n} | {pred / 1e3:.4f} | {pub / 1e3:.3f} | {err * 100:+.1f}% | {exp:.2f} ms |")
    else:
        for w, n, pred, pub, err, exp in rows:
            print(f"{w:>3} GPUs on {n} node(s): predicted {pred / 1e3:.4f} s/iter, published {pub / 1e3:.3f}, "
                  f"error {err * 100:+.1f}%, exposed comm {exp:.2f} ms")
    worst = max(abs(r[4]) for r in rows)
    print(f"\nlargest error {worst * 100:.1f}%; network {net.name}; " + "; ".join(net.describe()[1:3]))


if __name__ == "__main__":
    main()
