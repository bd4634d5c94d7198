"""``graphsub optimize FILE.py:ClassName --training``: the PyTorch route (issue 22: "PyTorch in: the emitted module").

The module is optimized for training in PyTorch (:func:`graphsub.optimize.torch_training.optimize_module_training`:
its trainable forward graph optimized by the one pipeline with a module target, each candidate's emitted module's
loss and gradients checked against the module's own ``loss.backward()``, full SGD steps timed against the module and
decided by :mod:`graphsub.optimize.decide`: the command decides nothing itself). When the verdict says the emitted
module is faster, ``-o OUT.py`` receives its class (``GraphModule``, readable code, one line per node) and ``OUT.pt``
its state dict (the module's weights under their own ``state_dict`` names, and the graph's constants); otherwise
nothing is written and the decision says why. ``-o OUT.onnx`` takes the ONNX route instead (the joint training graph).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import typer

from graphsub.cli.common import Exit, confirm_output, fail, out
from graphsub.errors import ImportError_
from graphsub.optimize.config import OptimizeConfig
from graphsub.spec import ModelSpec


def torch_route(training: bool, spec: ModelSpec, output: Path) -> bool:
    """Whether ``--training`` takes the PyTorch route: a module given, and no ``.onnx`` output asked for."""
    return training and spec.kind == "module" and output.suffix.lower() != ".onnx"


def check_options(spec: ModelSpec, output: Path, *, loss: str, params: str | None, batchnorm: str,
                  as_json: bool) -> None:
    """Usage errors of the PyTorch route, and the weights file's own checks (before any work)."""
    if output.suffix.lower() != ".py":
        fail(Exit.USAGE, "--training with a PyTorch module writes the optimized module as Python: -o OUT.py "
                         "(its weights go to OUT.pt); -o OUT.onnx writes the ONNX training graph instead", as_json)
    if loss != "cross_entropy" or params is not None or batchnorm != "batch":
        fail(Exit.USAGE, "the PyTorch route trains every parameter of the module with cross entropy, batch norm "
                         "in train mode; --loss/--params/--batchnorm apply to the ONNX training graph "
                         "(-o OUT.onnx)", as_json)
    confirm_output(spec, output.with_suffix(".pt"), as_json)


def run(spec: ModelSpec, shapes: dict[str, tuple[int, ...]], cfg: OptimizeConfig, output: Path, as_json: bool
        ) -> None:
    """Optimize (the library decides: :func:`graphsub.optimize.torch_training.optimize_module_training_with`), write
    when it chose the optimized module, report; exits with the command's code."""
    from graphsub.frontends.torch_export import random_tensors
    from graphsub.optimize.torch_training import optimize_module_training_with

    if not shapes:
        raise ImportError_("a FILE.py:ClassName model needs its input shapes: --input-shape x=8x3x32x32")
    tm = optimize_module_training_with(spec.load_module(), random_tensors(list(shapes.values()), cfg.seed), cfg)
    written = [str(p) for p in tm.write(output)] if tm.optimized else []
    code = Exit.OK if tm.verified else Exit.NOT_EQUIVALENT
    d = {"model": spec.text, **tm.to_dict(), "written": written or None, "exit_code": int(code)}
    if as_json:
        print(json.dumps(d, indent=2))
    else:
        _print(d, tm.max_grad_abs_diff)
    raise typer.Exit(int(code))


def _print(d: dict[str, Any], grad_diff: float) -> None:
    applied = ", ".join(f"{r} x{d['applied'].count(r)}" for r in dict.fromkeys(d["applied"])) or "none"
    out.print(f"[bold]{d['model']}[/] for training in PyTorch: {d['decision']}", highlight=False)
    out.print(f"substitutions: {applied}; gradients against the module's own backward: max |diff| {grad_diff:.3g}",
              highlight=False)
    if d["written"]:
        out.print(f"wrote {' and '.join(d['written'])}", highlight=False)
    else:
        out.print("nothing written (the optimized module was not found faster; the module itself stays)",
                  highlight=False)
