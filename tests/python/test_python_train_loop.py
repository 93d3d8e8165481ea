"""benchmarks/python_train_loop.py, the PyTorch peer of compare_python_api.py: its port of ddpbench's
fused gpt2 loss (ChunkedLinearCrossEntropy) must give the plain path's loss and gradients, chunks
that do not divide the tokens included, so that --gpt2-loss fused on both sides compares the same
arithmetic; and the loop must run gpt2 either way."""
import json
import os
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F

from build_paths import ROOT  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
from python_train_loop import ChunkedLinearCrossEntropy  # noqa: E402


@pytest.mark.parametrize("chunk_rows", [1, 3, 7, 64])
def test_the_fused_loss_is_the_plain_loss_and_its_gradients(chunk_rows):
    gen = torch.Generator().manual_seed(3)
    hidden = torch.randn(7, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (7,), generator=gen)
    plain = F.cross_entropy(hidden @ weight.t(), targets)
    plain_grads = torch.autograd.grad(plain, (hidden, weight))
    fused = ChunkedLinearCrossEntropy.apply(hidden, weight, targets, chunk_rows)
    fused_grads = torch.autograd.grad(fused, (hidden, weight))
    assert fused.dtype == torch.float64
    assert torch.allclose(fused, plain, rtol=1e-12, atol=0)
    for got, want in zip(fused_grads, plain_grads):
        assert torch.allclose(got, want, rtol=1e-10, atol=1e-14)


@pytest.mark.skipif(not hasattr(F, "scaled_dot_product_attention"), reason="gpt2's attention needs torch 2.x (SDPA)")
@pytest.mark.parametrize("loss", ["plain", "fused"])
def test_the_loop_trains_gpt2_with_either_loss(loss):
    out = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "python_train_loop.py"), "--workload", "gpt2",
                          "--device", "cpu", "--steps", "1", "--warmup", "0", "--batch", "1", "--seq-len", "4",
                          "--threads", "1", "--gpt2-loss", loss], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    (step,) = json.loads(out.stdout)["step_ms"]
    assert step > 0


@pytest.mark.parametrize("name", ["mlp", "transformer"])
def test_checkpointing_the_units_changes_no_gradient(name):
    """The peer of compare_checkpointing.py checkpoints each of ddpbench's units: the same gradients as
    without, so the two sides time the same arithmetic."""
    import python_train_loop as loop

    def gradients(checkpoint):
        loop.CHECKPOINT = checkpoint
        torch.manual_seed(0)
        model, _, inputs, targets, _ = loop.workload(name, 4, torch.device("cpu"))
        logits = model(inputs[:4])
        F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets[:4].reshape(-1)).backward()
        return [p.grad.clone() for p in model.parameters()]

    calls = []
    through_checkpoint = loop.checkpointed

    def counted(module, *inputs):
        calls.append(module)
        return through_checkpoint(module, *inputs)

    loop.checkpointed = counted
    try:
        plain = gradients(False)
        assert not calls
        checkpointed = gradients(True)
    finally:
        loop.CHECKPOINT = False
        loop.checkpointed = through_checkpoint
    assert len(calls) == {"mlp": 4, "transformer": 2}[name], "each of ddpbench's units checkpointed once"
    assert len(plain) == len(checkpointed)
    for got, want in zip(checkpointed, plain):
        assert torch.equal(got, want)
