"""PyTorch's own training loop, the reference ddpbench's `single` is held to below the parity check
(tests/models/test_reference_loop.cpp): parity with `single` cannot see a defect `single` shares.

    reference_loop.py MODEL.pt BATCHES.pt SETTINGS.json

loads the TorchScript file as PyTorch does (torch.jit.load), trains it on the batches ddpbench's own
loader assembled (BATCHES.pt: {"inputs": [...], "targets": [...]}, written by torch::pickle_save),
with the optimizer the resolved settings name (ddpbench's model-spec keys), one intra-op thread as
the test runs ddpbench, and prints each step's loss as a JSON list. Python's module.parameters()
lists a tied tensor once and torch.optim skips a parameter without a gradient: the behaviour
ddpbench must reproduce.
"""
import json
import sys

import torch
import torch.nn.functional as F


def make_optimizer(parameters, s):
    lr, decay = float(s["lr"]), float(s["weight_decay"])
    if s["optimizer"] == "adamw":
        return torch.optim.AdamW(parameters, lr=lr, weight_decay=decay)
    return torch.optim.SGD(parameters, lr=lr, momentum=float(s["momentum"]), weight_decay=decay)


def loss_of(output, target, s):
    if s["loss"] == "mse":
        return F.mse_loss(output.float(), target.float())
    return F.cross_entropy(output.reshape(-1, output.size(-1)).float(), target.reshape(-1))


def main(model_path, batches_path, settings_path):
    torch.set_num_threads(1)
    # The TorchScript interpreter as it runs a module before it optimises it: Debian trixie's Python
    # torch 2.6 never returns from the backward of a scripted module's third call (the first run of
    # its optimised graph), measured on a two-layer MLP; the unoptimised graph computes the same.
    torch._C._set_graph_executor_optimize(False)
    with open(settings_path) as f:
        settings = json.load(f)
    model = torch.jit.load(model_path)
    model.train()
    if settings.get("frozen") == "train":
        for p in model.parameters():
            p.requires_grad_(True)
    # The test's own file (its dict of lists carries TorchScript type tags, which PyTorch 2.6's
    # default weights_only loader refuses).
    batches = torch.load(batches_path, weights_only=False)
    optimizer = make_optimizer([p for p in model.parameters() if p.requires_grad], settings)
    losses = []
    for inputs, targets in zip(batches["inputs"], batches["targets"]):
        optimizer.zero_grad(set_to_none=True)
        loss = loss_of(model(inputs), targets, settings)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    print(json.dumps(losses))
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
