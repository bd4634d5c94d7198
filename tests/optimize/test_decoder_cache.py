"""Decoders with a key/value cache (issue 55): the past/present interface is recognised from the declarations, the
import sizes the total length as past + sequence, and a written model is checked against the input at the decoding
sizes (1, 1, 0), (1, 1, 127), (2, 7, 33), (1, 128, 0) -- empty pasts included, every output compared, presents too --
and at ``--check-sizes``; a candidate that differs at one of them is not written (the original is).  On the tiny
Llama export (TorchScript; the dynamo one is slow-marked) ``graphsub optimize`` writes a model that keeps every
symbolic dim name and matches the input at the four sizes."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from typer.testing import CliRunner

from graphsub.cli.app import app
from graphsub.errors import VerificationError
from graphsub.frontends.cache import CACHE_SIZES, CacheDims, cache_dims
from graphsub.frontends.dims import interface, restored
from graphsub.frontends.onnx_import import from_onnx
from graphsub.frontends.ort import make_session, run_session
from graphsub.optimize import OptimizeResult, optimize
from graphsub.search import Budget
from graphsub.symbolic import _trials, check_other_sizes, keep_symbolic

DIMS = CacheDims("batch", "seq", "past", "total")
FAST = {"cost": "roofline:cpu", "budget": Budget(time_s=5, k=4), "peers": "none", "eqsat_s": 0, "ort_search_s": 0}


def _cache_model(flag_empty_past: bool = False) -> onnx.ModelProto:
    """A one-layer toy decoder: the new tokens' embeddings appended to the past (``present.0.key``), logits the sum
    over the total length; ``flag_empty_past`` adds 1 to the logits when the past is empty (a candidate that is
    right at every size but past 0)."""
    f, i64 = TensorProto.FLOAT, TensorProto.INT64
    nodes = [
        helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
        helper.make_node("Unsqueeze", ["e", "one"], ["k"]),
        helper.make_node("Concat", ["past.0.key", "k"], ["present.0.key"], axis=2),
        helper.make_node("Cast", ["attention_mask"], ["m"], to=f),
        helper.make_node("Unsqueeze", ["m", "neg"], ["m3"]),
        helper.make_node("Mul", ["present.0.key", "m3"], ["masked"]),
        helper.make_node("ReduceSum", ["masked", "two"], ["sums"], keepdims=0),
        helper.make_node("Identity" if not flag_empty_past else "Add", ["sums"] + ["flag"] * flag_empty_past,
                         ["logits"]),
    ]
    if flag_empty_past:
        nodes[-1:-1] = [helper.make_node("Shape", ["past.0.key"], ["pl"], start=2, end=3),
                        helper.make_node("Equal", ["pl", "zero"], ["is0"]),
                        helper.make_node("Cast", ["is0"], ["flag"], to=f)]
    inits = [helper.make_tensor("emb", f, [16, 4], np.linspace(-1, 1, 64).tolist()),
             helper.make_tensor("one", i64, [1], [1]), helper.make_tensor("two", i64, [1], [2]),
             helper.make_tensor("neg", i64, [1], [-1]), helper.make_tensor("zero", i64, [1], [0])]
    graph = helper.make_graph(
        nodes, "toy_decoder",
        [helper.make_tensor_value_info("input_ids", i64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", i64, ["batch", "total"]),
         helper.make_tensor_value_info("past.0.key", f, ["batch", 1, "past", 4])],
        [helper.make_tensor_value_info("logits", f, ["batch", 1, 4]),
         helper.make_tensor_value_info("present.0.key", f, ["batch", 1, "total", 4])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_cache_interface_is_recognised_from_the_declarations() -> None:
    iface = interface(_cache_model())
    assert iface.cache == DIMS and cache_dims(*((iface.inputs, iface.outputs))) == DIMS
    assert DIMS.sizes(2, 7, 33) == {"batch": 2, "seq": 7, "past": 33, "total": 40}
    plain = interface(_cache_model()).inputs, ()  # no presents: no cache interface
    assert cache_dims(*plain) is None


def test_the_import_sizes_the_total_length_as_past_plus_sequence() -> None:
    g = from_onnx(_cache_model())
    types = dict(zip(g.input_names, g.input_types, strict=True))
    assert types["attention_mask"].shape == (1, 2) and types["past.0.key"].shape == (1, 1, 1, 4)
    fixed = from_onnx(_cache_model(), input_shapes={"input_ids": (1, 3)})  # the sequence given: total follows
    assert dict(zip(fixed.input_names, fixed.input_types, strict=True))["attention_mask"].shape == (1, 4)


def test_trials_keep_total_consistent_and_add_the_decoding_sizes() -> None:
    model = _cache_model()
    trials = _trials(interface(model), from_onnx(model), [{"past": 5}])
    assert all(t["total"] == t["past"] + t["seq"] for t in trials)
    for b, s, p in CACHE_SIZES:
        assert DIMS.sizes(b, s, p) in trials
    assert {"batch": 1, "seq": 1, "past": 5, "total": 6} in trials


def test_a_candidate_wrong_at_an_empty_past_is_refused() -> None:
    model = _cache_model()
    checked = keep_symbolic(model, model.SerializeToString(), graph=from_onnx(model))
    assert isinstance(checked, bytes)
    with pytest.raises(VerificationError, match="past=0") as e:
        keep_symbolic(model, _cache_model(flag_empty_past=True), graph=from_onnx(model))
    assert "logits" in str(e.value)
    with pytest.raises(ValueError, match="'nope'"):
        keep_symbolic(model, model, graph=from_onnx(model), sizes=[{"nope": 3}])


def test_check_sizes_option(tmp_path: Path) -> None:
    src = tmp_path / "toy.onnx"
    onnx.save(_cache_model(), src)
    runner = CliRunner()
    bad = runner.invoke(app, ["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--json", "--peers", "none",
                              "--check-sizes", "batch=2,bogus=3"])
    assert bad.exit_code == 2 and "bogus" in bad.output
    malformed = runner.invoke(app, ["optimize", str(src), "-o", str(tmp_path / "o.onnx"), "--check-sizes", "batch"])
    assert malformed.exit_code == 2


# ------------------------------------------------------------------------------------------ the tiny Llama export
def _compare_at_decoding_sizes(original: Path, written: Path, family: str = "llama") -> None:
    """``written`` keeps every symbolic dim name of ``original``'s inputs and outputs (the tiny ``family``
    decoder's) and matches it (logits and presents) at :data:`CACHE_SIZES`."""
    from graphsub.bench.decoders import build_decoder, feeds

    def declared(p: Path) -> list[tuple[str, list[int | str]]]:
        g = onnx.load(str(p), load_external_data=False).graph
        return [(v.name, [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim])
                for v in [*g.input, *g.output]]

    assert declared(written) == declared(original)
    layout = build_decoder(family).layout
    ref, got = make_session(str(original), optimization="disable"), make_session(str(written), optimization="all")
    for b, s, p in CACHE_SIZES:
        inputs = feeds(layout, b, s, p, seed=b + s + p)
        want, have = run_session(ref, inputs), run_session(got, inputs)
        assert len(want) == len(have) == 1 + len(layout.presents)
        for w, h in zip(want, have, strict=True):
            assert w.shape == h.shape and np.allclose(h, w, rtol=1e-4, atol=1e-4), (b, s, p)


def _export(out_dir: Path, exporter: str) -> Path:
    pytest.importorskip("transformers")
    from graphsub.bench.decoders import export_decoder

    exported = export_decoder("llama", out_dir, exporter)
    assert exported.path is not None, exported.error
    return exported.path


@pytest.fixture(scope="module")
def llama_ts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _export(tmp_path_factory.mktemp("decoders"), "torchscript")


def _optimize(src: Path, tmp_path: Path) -> tuple[Path, OptimizeResult]:
    out = tmp_path / "out.onnx"
    return out, optimize(str(src), output=out, **FAST)  # type: ignore[arg-type]


def test_optimize_keeps_the_tiny_llama_interface(llama_ts: Path, tmp_path: Path,
                                                 fake_timing: Callable[..., None]) -> None:
    out, res = _optimize(llama_ts, tmp_path)
    assert res.written == str(out) and res.graph is not None  # modelled: the And of the causal mask kept opaque
    _compare_at_decoding_sizes(llama_ts, out)


@pytest.mark.slow
def test_optimize_keeps_the_tiny_llama_interface_dynamo(tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    src = _export(tmp_path, "dynamo")
    out, _ = _optimize(src, tmp_path)
    _compare_at_decoding_sizes(src, out)


def test_cli_on_the_tiny_llama(llama_ts: Path, tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    out = tmp_path / "cli.onnx"
    r = CliRunner().invoke(app, ["optimize", str(llama_ts), "-o", str(out), "--json", "--peers", "none",
                                 "--budget", "20", "--check-sizes",
                                 "batch_size=1,sequence_length=3,past_sequence_length=0"])
    doc = json.loads(r.stdout)
    assert r.exit_code == 0 and doc["exit_code"] == 0 and doc["written"] == str(out), r.output
    _compare_at_decoding_sizes(llama_ts, out)


def test_the_tiny_llama_is_checked_at_the_decoding_sizes(llama_ts: Path) -> None:
    iface = interface(llama_ts)
    assert iface.cache == CacheDims("batch_size", "sequence_length", "past_sequence_length", "total_sequence_length")
    checked = check_other_sizes(llama_ts, restored(onnx.load(str(llama_ts)), iface), iface,
                                from_onnx(onnx.load(str(llama_ts))))
    for b, s, p in CACHE_SIZES:
        assert iface.cache.sizes(b, s, p) in checked  # the original runs there (empty pasts too): nothing skipped


def test_optimize_refuses_unknown_check_sizes_before_any_work(tmp_path: Path) -> None:
    src = tmp_path / "toy.onnx"
    onnx.save(_cache_model(), src)
    with pytest.raises(ValueError, match="'bogus'"):
        optimize(str(src), output=tmp_path / "o.onnx", check_sizes=[{"bogus": 2}], **FAST)  # type: ignore[arg-type]
    assert not (tmp_path / "o.onnx").exists()


def test_a_decoder_is_timed_at_a_decode_step_and_imported_at_sizes_that_are_not_one(
        tmp_path: Path, fake_timing: Callable[..., None]) -> None:
    """``optimize`` imports a decoder's free dims at distinct sizes that are never 1 (so that no rewrite relies on a
    length that varies) and times its candidates at a decode step (batch 1, sequence 1, a 128-long cache), where
    generation spends its time (:func:`graphsub.symbolic.decode_feeds`); ``--sizes`` times where it says."""
    from graphsub.frontends.onnx_io import load
    from graphsub.symbolic import DECODE_PAST, decode_feeds

    src = tmp_path / "dec.onnx"
    onnx.save(_cache_model(), src)
    g = load(src, generic=True)
    shapes = dict(zip(g.input_names, (t.shape for t in g.input_types), strict=True))
    assert shapes["input_ids"] == (2, 3) and shapes["past.0.key"][2] == 5 and shapes["attention_mask"] == (2, 8)
    step = decode_feeds(str(src), g)
    assert step is not None and "past=128" in step[1]
    feeds = step[0]
    assert feeds["input_ids"].shape == (1, 1) and feeds["past.0.key"].shape[2] == DECODE_PAST
    assert feeds["attention_mask"].shape == (1, DECODE_PAST + 1) and (feeds["attention_mask"] == 1).all()
    assert decode_feeds(str(src), g, {"input_ids": (1, 1), "attention_mask": (1, 6), "past.0.key": (1, 1, 5, 4)}
                        ) is None  # the user fixed the lengths: nothing free to time at
    res = optimize(str(src), keep_slower=True, **FAST)  # type: ignore[arg-type]
    assert any(n.startswith("timing: at a decode step") for n in res.portfolio_notes)
    sized = optimize(str(src), sizes={"seq": 4}, **FAST)  # type: ignore[arg-type]
    assert not any("decode step" in n for n in sized.portfolio_notes)


def test_a_candidate_slower_on_a_long_cache_is_not_kept(tmp_path: Path) -> None:
    """A decoder's candidate confirmed faster at the decode step is measured again on a 1,024-long cache
    (:data:`graphsub.symbolic.LONG_PAST`) and not kept when it is slower there (onnxruntime's MultiHeadAttention with
    past/present: faster at 128, 0.82x at 1,024 on the small Llama)."""
    from graphsub.optimize.timing import using_timers
    from graphsub.symbolic import LONG_PAST
    from helpers import fake_timers

    src = tmp_path / "dec.onnx"
    onnx.save(_cache_model(), src)
    mine = from_onnx(_cache_model(), sizes={"batch": 2, "seq": 3, "past": 5})

    def ms(model: bytes | str, feeds: object = None) -> float:
        if isinstance(model, str):
            return 10.0  # the original, read from its file
        long = isinstance(feeds, dict) and feeds["past.0.key"].shape[2] == LONG_PAST
        return 20.0 if long else 5.0

    def confirm(model: bytes | str, feeds: object, **kw: object) -> Callable[[float], float]:
        v = ms(model, feeds)  # a session's latency depends on the inputs it is timed on
        return lambda budget_ms: v

    timers = dataclasses.replace(fake_timers(lambda m: ms(m)), confirm=confirm)
    with using_timers(timers):
        res = optimize(str(src), extra_candidates=[("mine", mine, ())], **{**FAST, "cleanup": False,
                                                                            "spelling": False})
    assert res.kept_original, res.decision
    assert any("slower on a 1024-long cache" in n for n in res.portfolio_notes), res.portfolio_notes
    with using_timers(fake_timers(lambda m: ms(m))):  # faster everywhere: kept
        kept = optimize(str(src), extra_candidates=[("mine", mine, ())], **{**FAST, "cleanup": False,
                                                                             "spelling": False})
    assert not kept.kept_original and not any("long cache" in n and "not kept" in n for n in kept.portfolio_notes)


def test_a_decoder_gets_a_longer_search_priced_by_onnxruntime(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                              ) -> None:
    """5 s per past input (at least 30 s) at the default, plus a term per GB above a large model's threshold (pricing
    a region grows with its weights); a call that sets the search's seconds keeps them."""
    from graphsub.frontends import shared
    from graphsub.optimize import sizes
    from graphsub.optimize.config import OptimizeConfig
    from graphsub.spec import ModelSpec

    src = tmp_path / "toy.onnx"
    onnx.save(_cache_model(), src)
    spec = ModelSpec.parse(str(src))
    assert sizes.decoder_settings(spec, OptimizeConfig()).ort_search_s == sizes.DECODER_ORT_SEARCH_S
    assert sizes.decoder_settings(spec, OptimizeConfig(ort_search_s=7.0)).ort_search_s == 7.0
    monkeypatch.setattr(shared, "SHARE_BYTES", src.stat().st_size - 10**9)  # as if the file were 1 GB larger
    got = sizes.decoder_settings(spec, OptimizeConfig()).ort_search_s
    assert got == pytest.approx(sizes.DECODER_ORT_SEARCH_S + sizes.DECODER_ORT_SEARCH_S_PER_GB)
