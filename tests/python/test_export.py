"""scripts/ddpbench-export with this machine's Debian torch and torchvision: the files it writes,
what ddpbench makes of them, and one line with exit 2 for every bad input, with nothing written."""
import json
import os
import subprocess
import sys

import pytest

from build_paths import BUILD, ROOT

SCRIPT = os.path.join(ROOT, "scripts", "ddpbench-export")
FACTORIES = os.path.join(ROOT, "tests", "models")
DDPBENCH = os.path.join(BUILD, "ddpbench")

torch = pytest.importorskip("torch")


def export(tmp_path, *args):
    env = dict(os.environ, PYTHONPATH=FACTORIES)
    return subprocess.run([sys.executable, SCRIPT, *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)


def test_a_scripted_model_and_its_sidecar_load_and_train(tmp_path):
    out = tmp_path / "tiny.pt"
    r = export(tmp_path, "factories:tiny_mlp", "--input", "float:16", "--classes", "4", "--batch", "8",
               "--optimizer", "adamw", "--lr", "0.002", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "scripted" in r.stdout
    sidecar = json.loads((tmp_path / "tiny.json").read_text())
    assert sidecar["format"] == "ddpbench-model/1"
    assert sidecar["export_method"] == "script"
    assert sidecar["exported_from"] == "factories:tiny_mlp"
    assert (sidecar["input"], sidecar["target"], sidecar["global_batch"]) == ("float:16", "class:4", 8)
    assert (sidecar["optimizer"], sidecar["lr"]) == ("adamw", 0.002)
    # FLOPs where this torch can count them (2.1+), else said so and left out.
    if hasattr(__import__("torch.utils", fromlist=["flop_counter"]), "flop_counter"):
        # 16x32 + 32x4 multiply-adds forward, x2 FLOPs, x3 with backward (less: no input gradient)
        assert 0 < sidecar["flops_per_sample"] <= 3 * 2 * (16 * 32 + 32 * 4)
    else:
        assert "flops_per_sample" not in sidecar
        assert "not counted" in r.stdout
    # Readable as any new file is (the temporary files they were written as are owner-only).
    umask = os.umask(0)
    os.umask(umask)
    for path in (out, tmp_path / "tiny.json"):
        assert os.stat(path).st_mode & 0o777 == 0o666 & ~umask
    loaded = torch.jit.load(str(out))
    assert loaded(torch.randn(3, 16)).shape == (3, 4)
    if os.path.exists(DDPBENCH):
        run = subprocess.run([DDPBENCH, "--model", str(out), "--strategy", "single", "--steps", "2", "--warmup", "1",
                              "--repetitions", "2", "--no-json", "--threads", "1"], capture_output=True, text=True,
                             timeout=300)
        assert run.returncode == 0, run.stderr
        assert "tiny/single/world:1" in run.stdout


def test_what_scripting_cannot_take_is_traced_and_said(tmp_path):
    out = tmp_path / "traced.pt"
    (tmp_path / "untypable.py").write_text(
        "import torch\n"
        "class Untypable(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(4, 2)\n"
        "    def forward(self, x, *rest):  # TorchScript takes no *args\n"
        "        return self.fc(x)\n"
        "def make():\n"
        "    return Untypable()\n")
    r = export(tmp_path, "untypable:make", "--input", "float:4", "--classes", "2", "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert "traced instead" in r.stdout
    assert json.loads((tmp_path / "traced.json").read_text())["export_method"] == "trace"


@pytest.mark.parametrize("args, expected", [
    (["factories:tiny_mlp", "--input", "float:16x", "--classes", "4"], "--input: bad shape"),
    (["factories:tiny_mlp", "--input", "image:16", "--classes", "4"], "--input: expected float:SHAPE"),
    (["factories:tiny_mlp", "--input", "float:17", "--classes", "4"], "--input: the model rejects float:17"),
    (["factories:tiny_mlp", "--input", "float:16", "--classes", "5"], "--classes: the output's shape is [2, 4]"),
    (["factories:tiny_mlp", "--input", "float:16", "--next-token"], "--next-token: needs token inputs"),
    (["factories:next_token_model", "--input", "tokens:8", "--next-token"], "--vocab: token inputs need"),
    (["factories:not_a_module", "--input", "float:16", "--classes", "4"], "returned int, not a torch.nn.Module"),
    (["factories:nothing_here", "--input", "float:16", "--classes", "4"], "factories has no callable nothing_here"),
    (["no_such_module:f", "--input", "float:16", "--classes", "4"], "cannot import no_such_module"),
    (["factories:tiny_mlp", "--kwargs", "[1]", "--input", "float:16", "--classes", "4"], "--kwargs: expected a JSON object"),
    (["factories:tiny_mlp", "--kwargs", "{\"width\": 3}", "--input", "float:16", "--classes", "4"], "failed: TypeError"),
    (["factories:tiny_mlp", "--input", "float:16", "--classes", "4", "--optimizer", "adamw", "--momentum", "0.9"],
     "--momentum: applies to sgd"),
])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, args, expected):
    r = export(tmp_path, *args, "-o", str(tmp_path / "m.pt"))
    assert r.returncode == 2, r.stderr + r.stdout
    assert r.stderr.count("\n") == 1, r.stderr
    assert expected in r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".pt", ".json"))]


def test_output_paths_are_checked_before_anything_is_written(tmp_path):
    r = export(tmp_path, "factories:tiny_mlp", "--input", "float:16", "--classes", "4", "-o", str(tmp_path / "m.onnx"))
    assert r.returncode == 2 and "must end in .pt" in r.stderr
    r = export(tmp_path, "factories:tiny_mlp", "--input", "float:16", "--classes", "4", "-o", str(tmp_path / "no" / "m.pt"))
    assert r.returncode == 2 and "mkdir -p" in r.stderr
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("module, expected", [
    ("raise RuntimeError('no GPU here\\nsecond line')\n", "importing broken failed: RuntimeError: no GPU here"),
    ("def f(:\n", "importing broken failed: SyntaxError: invalid syntax"),
    ("import sys\nsys.exit(0)\n", "importing broken called sys.exit(0)"),
    ("import sys\ndef f():\n    sys.exit(0)\n", "broken:f(**{}) called sys.exit(0)"),
    ("import torch, sys\nclass M(torch.nn.Module):\n    def forward(self, x):\n        sys.exit(3)\n"
     "def f():\n    return M()\n", "the model's code called sys.exit(3)"),
])
def test_a_factory_module_that_raises_or_exits_is_one_line_exit_2(tmp_path, module, expected):
    (tmp_path / "broken.py").write_text(module)
    r = export(tmp_path, "broken:f", "--input", "float:16", "--classes", "4", "-o", str(tmp_path / "m.pt"))
    assert r.returncode == 2, r.stderr + r.stdout
    assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr, r.stderr
    assert expected in r.stderr
    assert not [p for p in os.listdir(tmp_path) if p.endswith((".pt", ".json")) or p.startswith(".")]


def _earlier_export(tmp_path):
    r = export(tmp_path, "factories:tiny_mlp", "--input", "float:16", "--classes", "4", "-o", str(tmp_path / "m.pt"))
    assert r.returncode == 0, r.stderr
    return {name: (tmp_path / name).read_bytes() for name in ("m.pt", "m.json")}


def test_a_failed_write_keeps_the_earlier_model_and_sidecar_and_leaves_no_temporary(tmp_path):
    earlier = _earlier_export(tmp_path)
    # A file-size limit (dash: 512-byte blocks) below the model file's size: writes fail with EFBIG,
    # as on a full disk (Python ignores SIGXFSZ; torch's own file writer would abort the process).
    env = dict(os.environ, PYTHONPATH=FACTORIES)
    r = subprocess.run(["/bin/sh", "-c", 'ulimit -f 4; exec "$0" "$@"', sys.executable, SCRIPT, "factories:tiny_mlp",
                        "--input", "float:16", "--classes", "4", "--batch", "16", "-o", str(tmp_path / "m.pt")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 2, r.stderr
    assert r.stderr.count("\n") == 1 and "-o: cannot write" in r.stderr and "File too large" in r.stderr, r.stderr
    assert {name: (tmp_path / name).read_bytes() for name in ("m.pt", "m.json")} == earlier
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".ddpbench-export-")]


def test_a_sidecar_that_cannot_be_written_leaves_the_earlier_model(tmp_path):
    earlier = _earlier_export(tmp_path)
    (tmp_path / "m.json").unlink()
    (tmp_path / "m.json").mkdir()
    r = export(tmp_path, "factories:tiny_mlp", "--input", "float:16", "--classes", "4", "--batch", "16",
               "-o", str(tmp_path / "m.pt"))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "m.json is a directory" in r.stderr, r.stderr
    assert (tmp_path / "m.pt").read_bytes() == earlier["m.pt"]
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".ddpbench-export-")]
