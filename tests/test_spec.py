"""Model specs parsed once (graphsub.spec): the same text means the same model in every command and the library
(a bare zoo name on the command line: tests/cli/test_cli_app.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from graphsub.errors import ExportError, ImportError_
from graphsub.spec import ModelSpec, OverwriteError, check_output, looks_like_path, split_specs
from graphsub.zoo import ZooError


@pytest.mark.parametrize(("text", "kind", "name", "kwargs"), [
    ("zoo:resnet:blocks=4", "zoo", "resnet", {"blocks": 4}),
    ("resnet:blocks=4", "zoo", "resnet", {"blocks": 4}),  # a bare zoo name, as benchmark grids write them
    ("zoo:bert:variant=faithful", "zoo", "bert", {"variant": "faithful"}),
    ("sru", "zoo", "sru", {}),
    ("model.onnx", "onnx", "model.onnx", {}),
    ("dir/model", "onnx", "dir/model", {}),
    ("no_such_model", "onnx", "no_such_model", {}),
    ("net.py:Net", "module", "net.py", {}),
])
def test_parse(text: str, kind: str, name: str, kwargs: dict[str, object]) -> None:
    spec = ModelSpec.parse(text)
    assert (spec.kind, spec.name, spec.zoo_kwargs, spec.text) == (kind, name, kwargs, text)
    assert (spec.path is None) == (kind == "zoo")


def test_an_existing_file_wins_over_a_zoo_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    Path("sru").write_bytes(b"")
    assert ModelSpec.parse("sru").kind == "onnx" and looks_like_path("sru")


def test_bare_and_prefixed_zoo_names_load_the_same_graph() -> None:
    a, b = ModelSpec.parse("resnet:blocks=2").load(), ModelSpec.parse("zoo:resnet:blocks=2").load()
    assert a.structural_hash() == b.structural_hash() and a.num_ops == 10


@pytest.mark.parametrize(("text", "error", "words"), [
    ("zoo:resnet:blocks", ImportError_, "expected key=value"),
    ("zoo:resnet:depth=3", ZooError, "no parameter"),
    ("zoo:nope", ZooError, "unknown model 'nope'"),
    ("nope", ZooError, "no such file either"),
    ("missing.onnx", ImportError_, "missing.onnx"),
    ("net.py:Net", ImportError_, "needs input shapes"),
])
def test_bad_specs_name_the_problem(text: str, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words):
        ModelSpec.parse(text).load()


def test_load_module(tmp_path: Path) -> None:
    src = tmp_path / "net.py"
    src.write_text("import torch\nclass Net(torch.nn.Module):\n    def forward(self, x):\n        return x.relu()\n"
                   "class Broken(torch.nn.Module):\n    def __init__(self):\n        raise RuntimeError('boom')\n")
    assert not ModelSpec.parse(f"{src}:Net").load_module().training
    with pytest.raises(ImportError_, match="RuntimeError: boom"):
        ModelSpec.parse(f"{src}:Broken").load_module()
    with pytest.raises(ImportError_, match="no such file"):
        ModelSpec.parse(f"{tmp_path / 'other.py'}:Net").load_module()


def test_check_output(tmp_path: Path) -> None:
    model = tmp_path / "m.onnx"
    model.write_bytes(b"x")
    spec = ModelSpec.parse(str(model))
    check_output(spec, tmp_path / "out.onnx")
    check_output(ModelSpec.parse("zoo:sru"), tmp_path / "m.onnx")  # a zoo model has no input file
    with pytest.raises(OverwriteError, match="refusing to overwrite the input file"):
        check_output(spec, model)
    link = tmp_path / "link.onnx"
    os.link(model, link)
    with pytest.raises(OverwriteError):
        check_output(spec, link)  # the same file under another name
    with pytest.raises(ExportError, match="does not exist"):
        check_output(spec, tmp_path / "no" / "out.onnx")


def test_split_specs() -> None:
    assert split_specs("resnet:blocks=4,sru,a:x=1,y=2, ,zoo:b") == ["resnet:blocks=4", "sru", "a:x=1,y=2", "zoo:b"]
