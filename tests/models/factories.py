"""Model factories the C++ tests export with scripts/ddpbench-export (tests/models/test_models.cpp)."""
import torch
from torch import nn


def resnet18_groupnorm(num_classes=10):
    """torchvision's ResNet-18 with GroupNorm in place of BatchNorm: per-sample normalisation, so
    every data-parallel strategy must match `single` exactly (BatchNorm's per-device statistics
    would not)."""
    import torchvision
    return torchvision.models.resnet18(num_classes=num_classes, norm_layer=lambda channels: nn.GroupNorm(1, channels))


def resnet18(num_classes=10):
    import torchvision
    return torchvision.models.resnet18(num_classes=num_classes)


class TinyMlp(nn.Module):
    def __init__(self, inputs=16, classes=4):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(inputs, 32), nn.ReLU(), nn.Linear(32, classes))

    def forward(self, x):
        return self.body(x)


def tiny_mlp(inputs=16, classes=4):
    return TinyMlp(inputs, classes)


class NextTokenModel(nn.Module):
    def __init__(self, vocab=64, width=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


def next_token_model(vocab=64):
    return NextTokenModel(vocab)


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(x)


def regressor():
    return Regressor()


def not_a_module():
    return 42


def resnet50_groupnorm(num_classes=1000):
    """ResNet-50 with GroupNorm (32 groups, as Wu and He's ResNet-50-GN): the proof that every
    strategy matches `single` on ResNet-50's architecture (benchmarks/own_model.sh)."""
    import torchvision
    return torchvision.models.resnet50(num_classes=num_classes, norm_layer=lambda channels: nn.GroupNorm(32, channels))


class _Holder(nn.Module):
    def __init__(self, name):
        super().__init__()
        self.register_parameter(name, nn.Parameter(torch.ones(2)))


class ClashingNames(nn.Module):
    """Parameters 'a.b_c' and 'a_b.c': one name once '.' is written as '_'."""
    def __init__(self):
        super().__init__()
        self.a = _Holder("b_c")
        self.a_b = _Holder("c")
        self.fc = nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x) + self.a.b_c.sum() + self.a_b.c.sum()


def clashing_names():
    return ClashingNames()


# ---- wrap units: which submodule calls a TorchScript model's forward may be split at -----------
# Each takes float:8 inputs and gives class:4 logits.

class LayerList(nn.Module):
    """A GPT-like stack: an input layer, a ModuleList run in a loop (TorchScript unrolls it), a
    head, and a parameter of the root's own: units inp, layers.0, layers.1, layers.2, head."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.layers = nn.ModuleList([nn.Linear(16, 16) for _ in range(3)])
        self.head = nn.Linear(16, 4)
        self.scale = nn.Parameter(torch.ones(16))
        self.act = nn.Tanh()

    def forward(self, x):
        h = self.act(self.inp(x))
        for layer in self.layers:
            h = h + torch.relu(layer(h)) * self.scale
        return self.head(h)


def layer_list():
    return LayerList()


class TiedHead(nn.Module):
    """The head reads the input layer's weight outside its call (weight tying): one unit."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 4)
        self.mid = nn.Linear(4, 8)

    def forward(self, x):
        return torch.nn.functional.linear(self.mid(self.inp(x)), self.inp.weight)


def tied_head():
    return TiedHead()


class CalledTwice(nn.Module):
    """One layer applied twice: one unit."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 4)
        self.again = nn.Linear(4, 4)

    def forward(self, x):
        return self.again(self.again(self.inp(x)))


def called_twice():
    return CalledTwice()


class CalledInABranch(nn.Module):
    """A layer that runs only for some inputs: one unit."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 4)
        self.maybe = nn.Linear(4, 4)

    def forward(self, x):
        h = self.inp(x)
        if bool(h.sum() > 1e9):
            h = self.maybe(h)
        return h


def called_in_a_branch():
    return CalledInABranch()


# ---- shapes the reference check trains under PyTorch's own loop (tests/models/test_reference_loop.cpp)
# Each takes float:8 inputs and gives class:4 logits, unless it says otherwise; none draws random
# numbers in forward (dropout), so both loops compute the same thing from the same file.

class TiedEmbedding(nn.Module):
    """GPT-2's weight tying: the output head *is* the embedding's weight (one tensor, two names).
    Takes tokens:8 over a vocabulary of 32 and predicts the next token."""
    def __init__(self, vocab=32, width=16):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.mix = nn.Linear(width, width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.embed.weight

    def forward(self, tokens):
        return self.head(torch.tanh(self.mix(self.embed(tokens))))


def tied_embedding():
    return TiedEmbedding()


class SharedSubmodule(nn.Module):
    """One Linear registered under two names and called through both."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.block = nn.Linear(8, 8)
        self.again = self.block
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.again(torch.tanh(self.block(torch.tanh(self.inp(x)))))))


def shared_submodule():
    return SharedSubmodule()


class FrozenBackbone(nn.Module):
    """Fine-tuning: a backbone saved with requires_grad False under a trained head."""
    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16))
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.backbone(x)))


def frozen_backbone():
    return FrozenBackbone()


class UnusedBranch(nn.Module):
    """A layer forward never calls (an auxiliary head left in the model): it gets no gradient."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.unused = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.inp(x)))


def unused_branch():
    return UnusedBranch()


class BuffersOfSeveralDtypes(nn.Module):
    """Buffers in float64, int64 and bool, each read by forward."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 8, dtype=torch.float64))
        self.register_buffer("order", torch.arange(7, -1, -1))
        self.register_buffer("keep", torch.tensor([True, False] * 4))

    def forward(self, x):
        h = torch.tanh(self.inp(x)) * self.scale.to(x.dtype)
        h = torch.where(self.keep, h, -h)
        return self.head(h.index_select(1, self.order))


def buffers_of_several_dtypes():
    return BuffersOfSeveralDtypes()


class _ScaledLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.scale = nn.Parameter(torch.ones(8, dtype=torch.float64))

    def forward(self, x):
        return self.lin(x) * self.scale.to(x.dtype)


class MixedDtypeUnit(nn.Module):
    """A float64 parameter beside float32 ones in one submodule (one wrap unit for fsdp)."""
    def __init__(self):
        super().__init__()
        self.block = _ScaledLinear()
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.block(x)))


def mixed_dtype_unit():
    return MixedDtypeUnit()


class Bf16Parameter(nn.Module):
    """A bfloat16 parameter in a float32 model (a quantised or low-precision adapter)."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.gate = nn.Parameter(torch.ones(8, dtype=torch.bfloat16))
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.inp(x)) * self.gate.to(x.dtype))


def bf16_parameter():
    return Bf16Parameter()


class EmptyParameter(nn.Module):
    """A parameter with no elements (a zero-width adapter, a pruned layer)."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 4)
        self.empty = nn.Parameter(torch.zeros(0))

    def forward(self, x):
        return self.inp(x) + self.empty.sum()


def empty_parameter():
    return EmptyParameter()


class CastsInternally(nn.Module):
    """Casts its hidden state to float32 itself: in the float64 parity pass the next layer's float64
    weight meets a float32 input."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        return self.head(torch.tanh(self.inp(x)).to(torch.float32))


def casts_internally():
    return CastsInternally()


class DetachedAuxiliary(nn.Module):
    """A unit whose output is detached before use (an auxiliary head logged, not trained through):
    its backward never runs, and its parameters get no gradient."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.aux = nn.Linear(8, 8)
        self.head = nn.Linear(8, 4)

    def forward(self, x):
        h = torch.tanh(self.inp(x))
        a = self.aux(h).detach()
        return self.head(h) + 0.0 * a.sum()


def detached_auxiliary():
    return DetachedAuxiliary()


class GruClassifier(nn.Module):
    """A GRU over a sequence of 6 steps of 8 features, then a linear head: nn.GRU returns a tuple,
    so it is no wrap unit, and most of the parameters stay with fsdp's root."""
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(8, 32, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        out, _ = self.gru(x)
        return self.head(out[:, -1])


def gru_classifier():
    return GruClassifier()


class LstmClassifier(nn.Module):
    """An LSTM (its output is (output, (h_n, c_n)), a nested tuple) between two linear layers."""
    def __init__(self):
        super().__init__()
        self.inp = nn.Linear(8, 16)
        self.lstm = nn.LSTM(16, 32, batch_first=True)
        self.head = nn.Linear(32, 4)

    def forward(self, x):
        out, (h, c) = self.lstm(torch.tanh(self.inp(x)))
        return self.head(out[:, -1] + h[0] + c[0])


def lstm_classifier():
    return LstmClassifier()


def sequential_chain():
    """An nn.Sequential of three Linear layers with a Tanh after the first two (and a Dropout of p 0
    after the first): exported, its forward calls its children in turn, so `pp` can cut it between
    the Linears (chain units [0, 1, 2], [3, 4], [5])."""
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Dropout(0.0), nn.Linear(32, 32), nn.Tanh(), nn.Linear(32, 4))


class NotAChain(nn.Module):
    """Three Linear layers with a residual connection: no chain (the first's output feeds two places)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 16)
        self.c = nn.Linear(16, 4)

    def forward(self, x):
        h = self.a(x)
        return self.c(h + self.b(h))


def not_a_chain():
    return NotAChain()
