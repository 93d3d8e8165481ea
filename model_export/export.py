"""ddpbench-export: a Python model factory -> a TorchScript file and its sidecar, for `ddpbench --model`.

    ddpbench-export torchvision.models:resnet50 --input float:3x224x224 --classes 1000 -o resnet50.pt

imports MODULE, calls CALLABLE (with --kwargs), scripts the model (torch.jit.script; torch.jit.trace
when scripting fails, and it says so), checks one forward pass on two samples against the target,
counts the FLOPs of a training step per sample where this torch can (torch.utils.flop_counter,
PyTorch 2.1 and later), and writes resnet50.pt and resnet50.json. The sidecar's keys are those of
`ddpbench --model-set` (docs/models.md). Bad input: one line naming the flag, exit 2, nothing written.
"""
import argparse
import importlib
import json
import os
import sys
import tempfile

FORMAT = "ddpbench-model/1"


class UsageError(Exception):
    pass


def parse_input(text):
    kind, _, shape = text.partition(":")
    if kind not in ("float", "tokens") or not shape:
        raise UsageError(f"--input: expected float:SHAPE or tokens:LENGTH, got '{text}'")
    try:
        dims = [int(d) for d in shape.split("x")]
    except ValueError:
        raise UsageError(f"--input: bad shape '{shape}' (sizes joined by x, as 3x224x224)") from None
    if any(d < 1 for d in dims) or (kind == "tokens" and len(dims) != 1):
        raise UsageError(f"--input: bad shape '{shape}'")
    return kind, dims


def build_parser():
    p = argparse.ArgumentParser(prog="ddpbench-export", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("factory", metavar="MODULE:CALLABLE",
                   help="a callable returning a torch.nn.Module (torchvision.models:resnet50, or your own module "
                        "on the current directory or PYTHONPATH)")
    p.add_argument("-o", "--output", required=True, help="the TorchScript file to write (its sidecar: same path, .json)")
    p.add_argument("--kwargs", default="{}", help="keyword arguments of CALLABLE, as a JSON object")
    p.add_argument("--input", required=True, help="one sample: float:3x224x224 (images) or tokens:LENGTH (token ids)")
    target = p.add_mutually_exclusive_group(required=True)
    target.add_argument("--classes", type=int, help="target: a class index over N classes")
    target.add_argument("--next-token", action="store_true", help="target: the next token (needs --vocab)")
    target.add_argument("--regression", action="store_true", help="target: a float tensor of the output's shape (mse)")
    p.add_argument("--vocab", type=int, help="token ids are drawn below this (token inputs)")
    p.add_argument("--optimizer", choices=["sgd", "adamw"], default="sgd")
    p.add_argument("--lr", type=float)
    p.add_argument("--momentum", type=float, help="sgd's momentum (default 0.9)")
    p.add_argument("--weight-decay", type=float)
    p.add_argument("--batch", type=int, default=32, help="the global batch ddpbench trains with (default 32)")
    p.add_argument("--name", help="the workload's name in ddpbench's results (default: the output's stem)")
    p.add_argument("--trace", action="store_true", help="trace instead of script")
    return p


def _first_line(error):
    lines = str(error).strip().splitlines()
    return lines[0] if lines else ""


def load_factory(spec, kwargs_text):
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise UsageError(f"MODULE:CALLABLE: expected a module and a callable, got '{spec}'")
    try:
        kwargs = json.loads(kwargs_text)
    except json.JSONDecodeError as e:
        raise UsageError(f"--kwargs: not JSON: {e}") from None
    if not isinstance(kwargs, dict):
        raise UsageError("--kwargs: expected a JSON object")
    sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise UsageError(f"MODULE:CALLABLE: cannot import {module_name}: {e}") from None
    except SystemExit as e:
        raise UsageError(f"MODULE:CALLABLE: importing {module_name} called sys.exit({e.code!r})") from None
    except Exception as e:  # the user's module: a SyntaxError or whatever it raises, in one line
        raise UsageError(f"MODULE:CALLABLE: importing {module_name} failed: {type(e).__name__}: {_first_line(e)}") from None
    factory = getattr(module, attr, None)
    if not callable(factory):
        raise UsageError(f"MODULE:CALLABLE: {module_name} has no callable {attr}")
    try:
        model = factory(**kwargs)
    except SystemExit as e:
        raise UsageError(f"MODULE:CALLABLE: {spec}(**{kwargs_text}) called sys.exit({e.code!r})") from None
    except Exception as e:  # the user's code: any failure is theirs to see, in one line
        raise UsageError(f"MODULE:CALLABLE: {spec}(**{kwargs_text}) failed: {type(e).__name__}: {e}") from None
    import torch
    if not isinstance(model, torch.nn.Module):
        raise UsageError(f"MODULE:CALLABLE: {spec} returned {type(model).__name__}, not a torch.nn.Module")
    return model


def example_batch(kind, dims, vocab, batch=2):
    import torch
    if kind == "float":
        return torch.randn(batch, *dims)
    return torch.randint(0, vocab, (batch, dims[0]))


def check_output(output, args, dims):
    import torch
    if not isinstance(output, torch.Tensor):
        raise UsageError(f"--input: the model returned {type(output).__name__}, not one tensor (ddpbench needs one)")
    shape = list(output.shape)
    if args.classes is not None and shape != [2, args.classes]:
        raise UsageError(f"--classes: the output's shape is {shape} for 2 samples, not [2, {args.classes}]")
    if args.next_token and shape != [2, dims[0], args.vocab]:
        raise UsageError(f"--next-token: the output's shape is {shape} for 2 samples, not [2, {dims[0]}, {args.vocab}]")
    if args.regression and (not shape or shape[0] != 2 or not output.is_floating_point()):
        raise UsageError(f"--regression: the output {shape} is not a float [batch, ...] tensor")


def count_flops(model, batch, args):
    """Forward + backward FLOPs per sample, or (None, why) where this torch cannot count them."""
    import torch
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None, f"this torch ({torch.__version__}) has no torch.utils.flop_counter (PyTorch 2.1+)"
    model.train()
    counter = FlopCounterMode(display=False)
    with counter:
        output = model(batch)
        output.float().sum().backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops() / batch.shape[0], None


def serialize(scripted):
    """The TorchScript file's bytes, in memory: torch's own file writer aborts the process on a write
    error (a full disk, a file-size limit), so the bytes are written by Python, which raises."""
    import io
    import torch
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    return buffer.getvalue()


def write_both(model_path, sidecar_path, model_bytes, sidecar):
    """Writes the model and its sidecar both or neither: each to a temporary file beside its target,
    and only once both are whole are they renamed over their targets. On a failure nothing is left
    and the earlier files, if any, are as they were."""
    for flag_path in (model_path, sidecar_path):
        if os.path.isdir(flag_path):
            raise UsageError(f"-o: {flag_path} is a directory")
    directory = os.path.dirname(os.path.abspath(model_path))
    temporaries = []
    try:
        for data in (model_bytes, (json.dumps(sidecar, indent=2) + "\n").encode("utf-8")):
            fd, path = tempfile.mkstemp(dir=directory, prefix=".ddpbench-export-")
            temporaries.append(path)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        # mkstemp makes files only their owner can read: give them the mode a new file would have.
        umask = os.umask(0)
        os.umask(umask)
        for path in temporaries:
            os.chmod(path, 0o666 & ~umask)
        os.replace(temporaries[0], model_path)
        temporaries.pop(0)
        os.replace(temporaries[0], sidecar_path)
        temporaries.pop(0)
    except OSError as e:
        raise UsageError(f"-o: cannot write {model_path}: {e.strerror or e}") from None
    finally:
        for path in temporaries:
            try:
                os.unlink(path)
            except OSError:
                pass


def export(args):
    import torch
    kind, dims = parse_input(args.input)
    if kind == "tokens" and not args.vocab:
        raise UsageError("--vocab: token inputs need the vocabulary size")
    if kind == "float" and args.vocab:
        raise UsageError("--vocab: applies to token inputs only")
    if args.next_token and kind != "tokens":
        raise UsageError("--next-token: needs token inputs (--input tokens:LENGTH)")
    if args.classes is not None and args.classes < 2:
        raise UsageError("--classes: must be at least 2")
    if args.batch < 1:
        raise UsageError("--batch: must be at least 1")
    if args.optimizer == "adamw" and args.momentum is not None:
        raise UsageError("--momentum: applies to sgd")
    out = args.output
    if not out.endswith(".pt"):
        raise UsageError(f"-o: {out}: the TorchScript file's name must end in .pt (its sidecar is the same with .json)")
    directory = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(directory):
        raise UsageError(f"-o: the directory {directory} does not exist (mkdir -p it first)")

    torch.manual_seed(0)
    model = load_factory(args.factory, args.kwargs)
    batch = example_batch(kind, dims, args.vocab)
    model.train()
    try:
        with torch.no_grad():
            check_output(model(batch), args, dims)
    except UsageError:
        raise
    except Exception as e:
        raise UsageError(f"--input: the model rejects {args.input}: {type(e).__name__}: {str(e).splitlines()[0]}") from None

    method, note = "script", None
    if args.trace:
        method = "trace"
    else:
        try:
            scripted = torch.jit.script(model)
        except Exception as e:
            method = "trace"
            note = f"torch.jit.script failed ({type(e).__name__}: {str(e).strip().splitlines()[0]}); traced instead"
    if method == "trace":
        try:
            scripted = torch.jit.trace(model, batch, check_trace=False)
        except Exception as e:
            raise UsageError(f"MODULE:CALLABLE: neither scripting nor tracing works: {type(e).__name__}: {e}") from None
    with torch.no_grad():
        check_output(scripted(batch), args, dims)

    flops, why_not = count_flops(model, batch, args)
    sidecar = {"format": FORMAT, "exported_from": args.factory, "export_method": method,
               "torch_version": torch.__version__, "input": args.input, "global_batch": args.batch,
               "optimizer": args.optimizer}
    if args.name:
        sidecar["name"] = args.name
    if args.classes is not None:
        sidecar["target"] = f"class:{args.classes}"
    elif args.next_token:
        sidecar["target"] = "next-token"
    else:
        sidecar["target"] = "regression"
    for key, value in (("vocab", args.vocab), ("lr", args.lr), ("momentum", args.momentum),
                       ("weight_decay", args.weight_decay), ("flops_per_sample", flops)):
        if value is not None:
            sidecar[key] = value

    sidecar_path = out[:-3] + ".json"
    write_both(out, sidecar_path, serialize(scripted), sidecar)
    parameters = sum(p.numel() for p in model.parameters())
    how = "scripted" if method == "script" else "traced"
    print(f"ddpbench-export: {out} ({how}, {parameters:,} parameters) and {sidecar_path}")
    if note:
        print(f"ddpbench-export: note: {note}")
    if flops is None:
        print(f"ddpbench-export: FLOPs per sample not counted: {why_not}; add \"flops_per_sample\" to "
              f"{sidecar_path} if you know them")
    else:
        print(f"ddpbench-export: {flops / 1e9:.3f} GFLOP per sample (forward + backward, torch.utils.flop_counter)")
    print(f"run it: ddpbench --model {out} --strategy all")
    return 0


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        return export(args)
    except UsageError as e:
        print(f"ddpbench-export: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # the model's own code (its forward, its scripting) called sys.exit
        print(f"ddpbench-export: error: MODULE:CALLABLE: the model's code called sys.exit({e.code!r}); "
              "nothing was written", file=sys.stderr)
        return 2
