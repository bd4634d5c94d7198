"""Generation-level measure of the decoders (:mod:`graphsub.bench.decoders`): for one decoder (family, size,
exporter), every variant generates the same tokens greedily, and its prefill and decode steps are timed against the
plain export under ONNX Runtime.

**The variants** (:func:`produce`): ``ort`` (the plain export, :data:`BASELINE`), each requested peer of
:data:`~graphsub.optimize.peers.PEERS` run on it as the suite runs them (:func:`~graphsub.optimize.peers.run_peer`,
a process each; ORT's transformer optimizer only where it knows the model type, :data:`TRANSFORMER_TYPES`),
``genai-builder`` (onnxruntime-genai's model builder on a Hugging Face folder of the *same* PyTorch model,
:func:`graphsub.bench.genai_builder.save_folder`; its model saved again as one file, weights inline), ``graphsub``
(``graphsub optimize`` on the plain export, in a process of its own with the suite's
:func:`~graphsub.bench.suite.runner.graphsub_tool` and ``budget_s``), and any extra ONNX files given by name.

**Verified** (:func:`inspect`): the variant's greedy ids over ``tokens`` new tokens after a random prompt
(:func:`~graphsub.bench.decoders.greedy_generate` under ORT_ENABLE_ALL, 1 thread) are the original's, and its
logits at a prefill of :data:`PREFILL` random tokens are within the export check's tolerance of the original's
(``max|got - ref| <= ATOL + RTOL * max|ref|``, :mod:`graphsub.bench.suite.export`).  The original's own ids are
also compared with PyTorch's (``torch_match``).  What ONNX Runtime makes of each file (op count, fused kernels) is
:func:`~graphsub.optimize.peers.ort_view`'s.

**Timed** (:func:`time_graphs`): each graph of :data:`GRAPHS` the model's positions hold -- the prefill of
:data:`PREFILL` tokens (empty pasts) and one decode step on random pasts (normal(0, 1)) of 128 and 1,024 tokens --
at each thread count, every verified variant side by side with the suite's
:func:`~graphsub.bench.suite.measure.time_variants` (rounds in rotating order, a few sessions per variant used in
turn, an A/A arm of the original in sessions of its own) and the verdict of
:func:`graphsub.optimize.decide.verdict` per variant (speedup, its interval, the A/A ratio).  Each session is fed the
inputs its graph has (:func:`fit_feeds`: the genai builder's has no ``position_ids``; its mask is over the total
length, as the plain export's).  Then each variant is re-timed against the original on its own (:func:`confirm`:
:func:`graphsub.optimize.decide.compare`, fresh session groups with the A/A control in each): the table's speedup,
interval and verdict are that re-timing's.  A decode step's tokens/s is ``1000 / ms``.  Byte-identical files are
timed once (``same_as``).

:func:`run_decode` writes one JSON record per decoder to ``<out>/<name>.jsonl`` and the Markdown table
(:func:`decode_table`) to ``<out>/<name>.md``.

>>> graphs_for(512)
['prefill', 'decode@128']
>>> tokens_per_s(2.0)
500.0
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from graphsub.bench.records import machine_info, timestamp, versions

BASELINE = "ort"
GENAI = "genai-builder"
GRAPHSUB = "graphsub"
#: graphsub's head-to-head re-timing against the genai builder (:func:`confirm`), in its timing entries
VS_GENAI = "vs_genai"
#: the prefill's length (tokens), and the prompt's length of the generation check
PREFILL = 128
PROMPT = 16
#: the timed graphs: name -> (sequence length, past length)
GRAPHS: dict[str, tuple[int, int]] = {"prefill": (PREFILL, 0), "decode@128": (1, 128), "decode@1024": (1, 1024)}
#: the peers run by default (ORT's transformer optimizer applies where :data:`TRANSFORMER_TYPES` knows the family)
DEFAULT_PEERS = ("onnxslim", "onnxsim", "onnxscript", "ort-transformers-99")
#: the decoder families ORT's transformer optimizer has a model type for
TRANSFORMER_TYPES = {"gpt2": "gpt2"}
PEER_TIMEOUT_S = 600.0

Outcome = dict[str, Any]


def graphs_for(positions: int) -> list[str]:
    """The graphs of :data:`GRAPHS` a model of ``positions`` positions holds (past plus sequence within them)."""
    return [g for g, (seq, past) in GRAPHS.items() if seq + past <= positions]


def tokens_per_s(ms: float) -> float:
    """Decode tokens per second of a one-token step of ``ms`` milliseconds."""
    return 1000.0 / ms


# ------------------------------------------------------------------------------------------------- variants
def transformer_meta(family: str, module: Any) -> dict[str, Any] | None:
    """ORT's transformer optimizer's arguments for ``family`` (None: it has no model type for it)."""
    if family not in TRANSFORMER_TYPES:
        return None
    c = module.model.config
    return {"model_type": TRANSFORMER_TYPES[family], "num_heads": int(c.num_attention_heads),
            "hidden_size": int(c.hidden_size)}


def _peer_outcome(name: str, src: Path, dst: Path, meta: Any, registry: Mapping[str, Any] | None,
                  timeout_s: float) -> Outcome:
    from graphsub.optimize.peers import run_peer

    res = run_peer(name, src, dst, meta, registry=registry, timeout_s=timeout_s)
    out: Outcome = {"status": res.status, "error": res.error, "seconds": res.seconds}
    if name == GRAPHSUB:  # what it decided and why (its portfolio's notes say what the budget left out)
        out.update({k: res.info.get(k) for k in ("decision", "chosen", "graphsub_timings_s", "portfolio_notes")})
    if res.status == "ok":
        out["path"] = str(dst)
    return out


def genai_outcome(family: str, module: Any, work: Path) -> Outcome:
    """The genai builder's model of ``module``'s own weights (its folder: :func:`~graphsub.bench.genai_builder.
    save_folder`), or why there is none (not-installed, not-applicable for a family it does not build, failed)."""
    import time

    from graphsub.bench import genai_builder as gb
    from graphsub.bench.suite.export import _quiet

    if not gb.available():
        return {"status": "not-installed", "error": "onnxruntime_genai is not importable", "seconds": 0.0}
    if module.model.config.model_type not in gb.ARCHITECTURES:
        return {"status": "not-applicable", "error": f"the builder does not build {family}", "seconds": 0.0}
    t0 = time.perf_counter()
    try:
        with _quiet():  # save_pretrained's progress bar (ours owns the terminal)
            folder = gb.save_folder(module.model, work / "hf")
        built = gb.build(folder, work / GENAI)
    except (gb.BuilderFailed, ValueError) as e:
        return {"status": "failed", "error": str(e).splitlines()[0], "seconds": time.perf_counter() - t0}
    seconds = time.perf_counter() - t0
    dst = gb.inline(built.model, work / f"{GENAI}.onnx")  # one file where it fits: ort_view reads ORT's graph of it
    return {"status": "ok", "error": "", "seconds": seconds, "path": str(dst)}


def produce(family: str, module: Any, src: Path, work: Path, *, peers: Sequence[str], graphsub: bool,
            genai: bool, budget_s: float | None, seed: int,
            extra: Mapping[str, Path] | None = None) -> dict[str, Outcome]:
    """Every variant of the decoder exported at ``src`` (module docstring), in report order: per name ``status``,
    ``error``, ``seconds`` and ``path`` when ok.  Peers and graphsub run in processes of their own."""
    from graphsub.bench.suite.runner import graphsub_tool
    from graphsub.frontends.onnx_io import file_bytes
    from graphsub.optimize.budget import DEFAULT_TIME_S, PER_GB_S
    from graphsub.optimize.peers import PeerInput

    work.mkdir(parents=True, exist_ok=True)
    meta = PeerInput(transformer=transformer_meta(family, module))
    out = {BASELINE: _peer_outcome(BASELINE, src, work / f"{BASELINE}.onnx", meta, None, PEER_TIMEOUT_S)}
    for peer in (p for p in peers if p != BASELINE):
        if peer.startswith("ort-transformers") and meta.transformer is None:
            out[peer] = {"status": "not-applicable", "seconds": 0.0,
                         "error": f"ORT's transformer optimizer has no model type for {family}"}
            continue
        out[peer] = _peer_outcome(peer, src, work / f"{peer}.onnx", meta, None, PEER_TIMEOUT_S)
    if genai:
        out[GENAI] = genai_outcome(family, module, work)
    if graphsub:
        tool = functools.partial(graphsub_tool, budget_s=budget_s, seed=seed)
        # its own default budget grows by PER_GB_S per GB of weights (a 1 B model's 4.4 GB: about half an hour)
        timeout = (budget_s or DEFAULT_TIME_S) * 6 + 300 + (0 if budget_s else 2 * PER_GB_S * file_bytes(src) / 1e9)
        out[GRAPHSUB] = _peer_outcome(GRAPHSUB, src, work / f"{GRAPHSUB}.onnx", meta, {GRAPHSUB: tool}, timeout)
    for name, path in (extra or {}).items():
        ok = Path(path).is_file()
        out[name] = {"status": "ok" if ok else "failed", "error": "" if ok else f"no file {path}", "seconds": 0.0,
                     **({"path": str(path)} if ok else {})}
    return out


# ------------------------------------------------------------------------------------------------- checking
def fit_feeds(sess: Any, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs ``sess``'s graph has, each in the integer type it takes (the genai builder's graph has no
    ``position_ids``; an ``int32`` mask where a graph takes one).

    >>> class S:
    ...     def get_inputs(self):
    ...         return [type("I", (), {"name": "a", "type": "tensor(int32)"})()]
    >>> fit_feeds(S(), {"a": np.ones(2, np.int64), "b": np.ones(1)})["a"].dtype
    dtype('int32')
    """
    types = {"tensor(int32)": np.int32, "tensor(int64)": np.int64}
    out = {}
    for i in sess.get_inputs():
        if i.name in feeds:
            v = feeds[i.name]
            out[i.name] = v.astype(types[i.type]) if i.type in types and v.dtype.kind in "iu" else v
    return out


def _run(path: Path, feeds: Mapping[str, np.ndarray]) -> np.ndarray:
    """The logits of one call of ``path`` (ORT_ENABLE_ALL, 1 thread) on ``feeds``."""
    from graphsub.frontends.ort import make_session, run_session

    sess = make_session(os.fspath(path), optimization="all", threads=1)
    return run_session(sess, fit_feeds(sess, feeds), outputs=["logits"])[0]


def prefill_error(original: Path, candidate: Path, layout: Any, seed: int) -> tuple[float, float]:
    """max |candidate - original| of the logits at a prefill of :data:`PREFILL` random tokens, and max |original|."""
    from graphsub.bench.decoders import feeds

    f = feeds(layout, 1, PREFILL, 0, seed=seed)
    ref, got = _run(original, f), _run(candidate, f)
    if got.shape != ref.shape:
        return float("inf"), float(np.abs(ref).max())
    return float(np.abs(got.astype(np.float64) - ref).max()), float(np.abs(ref).max())


def inspect(outcomes: dict[str, Outcome], reference: Sequence[int], prompt: Sequence[int], tokens: int,
            layout: Any, seed: int) -> None:
    """Verify every produced variant against the original (module docstring) and read ONNX Runtime's view of it, in
    place: ``tokens_match``, ``first_mismatch`` (index of the first differing token, None), ``prefill_err`` and
    ``prefill_tol``, ``verified``, ``ops``, ``fused_kernels``; an error while running is ``check_error``."""
    from graphsub.bench.decoders import greedy_generate
    from graphsub.bench.suite.export import ATOL, RTOL
    from graphsub.optimize.peers import ort_view

    original = Path(outcomes[BASELINE]["path"])
    for o in outcomes.values():
        if o["status"] != "ok":
            continue
        try:
            gen = greedy_generate(o["path"], prompt, tokens, threads=1, head_dim=layout.head_dim)
            err, scale = prefill_error(original, Path(o["path"]), layout, seed)
            view = ort_view(Path(o["path"]), threads=1)
        except Exception as e:  # a variant that does not run is a result
            o.update(verified=False, check_error=f"{type(e).__name__}: {str(e).splitlines()[0][:300]}")
            continue
        mismatch = next((k for k, (a, b) in enumerate(zip(gen.tokens, reference, strict=True)) if a != b), None)
        tol = ATOL + RTOL * scale
        o.update(tokens=gen.tokens, tokens_match=mismatch is None, first_mismatch=mismatch, prefill_err=err,
                 prefill_tol=tol, verified=mismatch is None and err <= tol, ops=view.ops,
                 fused_kernels=view.fused_kernels, generation_prefill_ms=1e3 * gen.step_s[0],
                 generation_tokens_per_s=_generation_rate(gen.step_s))


def _generation_rate(step_s: Sequence[float]) -> float | None:
    """Decode tokens/s of one generation (its steps after the prefill; descriptive, one unpaired run)."""
    steps = step_s[1:]
    return len(steps) / sum(steps) if steps and sum(steps) > 0 else None


# --------------------------------------------------------------------------------------------------- timing
def fitted_session(model: bytes | str, feeds: dict[str, np.ndarray], *, threads: int, provider: str = "cpu",
                   fingerprint: bool = False) -> Any:
    """:func:`graphsub.optimize.timing.session_timer` fed the inputs its graph has (:func:`fit_feeds`)."""
    from graphsub.optimize.timing import session_timer

    timer = session_timer(model, feeds, threads=threads, provider=provider, fingerprint=fingerprint)
    timer.feeds = fit_feeds(timer.sess, feeds)
    return timer


def _digest(path: Path) -> str:
    """SHA-256 of the model's bytes, its external data included, read in chunks (a 1 B model's 4 GB)."""
    from graphsub.frontends.onnx_io import model_files

    h = hashlib.sha256()
    for f in model_files(path):
        with f.open("rb") as stream:
            for chunk in iter(lambda: stream.read(1 << 24), b""):
                h.update(chunk)
    return h.hexdigest()


def distinct(outcomes: dict[str, Outcome]) -> dict[str, Path]:
    """The verified variants to time, one per distinct file (the original first); a byte-identical copy says
    ``same_as`` (in place)."""
    first: dict[str, str] = {}
    paths: dict[str, Path] = {}
    for name, o in outcomes.items():
        if not o.get("verified"):
            continue
        d = _digest(Path(o["path"]))
        if d in first:
            o["same_as"] = first[d]
        else:
            first[d], paths[name] = name, Path(o["path"])
    return paths


def time_graphs(outcomes: dict[str, Outcome], layout: Any, graphs: Sequence[str], threads: Sequence[int], *,
                rounds: int, budget_ms: float, seed: int,
                on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Time the verified variants side by side on each of ``graphs`` at each thread count (module docstring), in
    place: ``timing[graph][threads]`` of each variant is :func:`~graphsub.bench.suite.measure.summarize`'s entry
    (``ms``, ``speedup``, ``verdict`` with its interval and the A/A ratio; the baseline keeps ``aa_rounds_ms`` and
    the A/A ratio as ``aa_ratio``, None without another variant) plus ``tokens_per_s`` for a decode step.  Returns
    the load averages before and after each timing."""
    from graphsub.bench.decoders import feeds
    from graphsub.bench.suite.measure import time_variants
    from graphsub.optimize.timing import Timers

    paths = distinct(outcomes)
    if BASELINE not in paths:
        return {"error": "the original does not verify against itself"}
    timers = Timers(session=fitted_session)
    loads: dict[str, Any] = {}
    for graph in graphs:
        seq, past = GRAPHS[graph]
        f = feeds(layout, 1, seq, past, seed=seed)
        for n in threads:
            if on_step is not None:
                on_step(f"{graph}, {n} thread(s)")
            run = time_variants(paths, f, threads=n, rounds=rounds, budget_ms=budget_ms, timers=timers,
                                baseline=BASELINE)
            summary = run.summary(BASELINE)
            summary[BASELINE]["aa_ratio"] = next((e["verdict"]["aa_ratio"] for e in summary.values()
                                                  if e.get("verdict")), None)
            for name, entry in summary.items():
                if seq == 1:
                    entry["tokens_per_s"] = tokens_per_s(entry["ms"])
                outcomes[name].setdefault("timing", {}).setdefault(graph, {})[str(n)] = entry
            loads[f"{graph}@{n}"] = [run.load_avg_before, run.load_avg_after]
            confirm(outcomes, paths, f, graph, n, budget_ms=budget_ms, timers=timers)
    for o in outcomes.values():
        if "same_as" in o:
            o["timing"] = outcomes[o["same_as"]].get("timing", {})
    return loads


def confirm(outcomes: dict[str, Outcome], paths: Mapping[str, Path], feeds: dict[str, np.ndarray], graph: str,
            threads: int, *, budget_ms: float, timers: Any) -> None:
    """Re-time each variant against the original on its own (:func:`graphsub.optimize.decide.compare`: fresh
    session groups of the original, the variant and the original again, the A/A control), at the suite's threshold
    and ``ALPHA / k`` for ``k`` variants; stored as ``timing[graph][threads]["confirm"]`` (the verdict without its
    rounds' lists but ``original_ms`` / ``candidate_ms``, in place).  Then, where both ran, graphsub's output is
    re-timed head to head against the genai builder's (the builder's in the original's place, its own A/A control):
    ``graphsub``'s ``timing[graph][threads]["vs_genai"]``, the direct measure of the target that graphsub's output
    be at least as fast as the hand-built graph (two ratios over ``ort`` each carry a session's noise)."""
    from graphsub.bench.suite.measure import min_speedup
    from graphsub.optimize import decide

    others = [n for n in paths if n != BASELINE]
    for name in others:
        makers = decide.session_makers(str(paths[BASELINE]), str(paths[name]), feeds, threads=threads,
                                       timers=timers)
        v = decide.compare(*makers, budget_ms=budget_ms, min_speedup=min_speedup(),
                           alpha=decide.ALPHA / len(others))
        outcomes[name]["timing"][graph][str(threads)]["confirm"] = _stored(v)
    if {GENAI, GRAPHSUB} <= set(paths):  # the target: graphsub's output at least the builder's, head to head
        makers = decide.session_makers(str(paths[GENAI]), str(paths[GRAPHSUB]), feeds, threads=threads,
                                       timers=timers)
        v = decide.compare(*makers, budget_ms=budget_ms, min_speedup=min_speedup(), alpha=decide.ALPHA)
        outcomes[GRAPHSUB]["timing"][graph][str(threads)][VS_GENAI] = _stored(v)


def _stored(v: Any) -> dict[str, Any]:
    """A verdict as a record stores it: without its rounds' lists but ``original_ms`` / ``candidate_ms``."""
    return {k: x for k, x in v.to_dict().items() if k not in ("aa_ms", "group")}


# ------------------------------------------------------------------------------------------------ one decoder
def run_decoder(family: str, size: str, exporter: str, work: Path, *, peers: Sequence[str] = DEFAULT_PEERS,
                graphsub: bool = True, genai: bool = True, extra: Mapping[str, Path] | None = None,
                tokens: int = 64, threads: Sequence[int] = (1,), rounds: int = 7, budget_ms: float = 300.0,
                budget_s: float | None = None, seed: int = 0,
                on_step: Callable[[str], None] | None = None) -> dict[str, Any]:
    """One decoder's record (module docstring): export it (a failed export is the record's ``error``), produce the
    variants, verify them over ``tokens`` greedy tokens, time the graphs.  ``on_step`` hears what starts next."""
    from graphsub.bench.decoders import build_decoder, export_decoder, greedy_generate, torch_greedy

    say = on_step or (lambda _: None)
    rec: dict[str, Any] = {"id": f"{family}.{size}.{exporter}", "family": family, "size": size,
                           "exporter": exporter, "tokens": tokens, "threads": list(threads), "seed": seed,
                           "started_at": timestamp()}
    say("export")
    exported = export_decoder(family, work, exporter, size)
    if not exported.ok:
        return {**rec, "error": f"export failed ({exported.stage}): {exported.error}", "variants": {}}
    assert exported.path is not None
    module = build_decoder(family, size)
    layout = module.layout
    prompt = np.random.default_rng(seed).integers(3, layout.vocab, PROMPT).tolist()
    say("variants")
    outcomes = produce(family, module, exported.path, work / "variants", peers=peers, graphsub=graphsub,
                       genai=genai, budget_s=budget_s, seed=seed, extra=extra)
    reference = greedy_generate(exported.path, prompt, tokens, threads=1).tokens
    say("verify")
    inspect(outcomes, reference, prompt, tokens, layout, seed)
    graphs = graphs_for(module.positions)
    rec.update(prompt=prompt, reference=reference, torch_match=torch_greedy(module, prompt, tokens) == reference,
               graphs=graphs, skipped_graphs=[g for g in GRAPHS if g not in graphs], positions=module.positions)
    rec["timing_load_avg"] = time_graphs(outcomes, layout, graphs, threads, rounds=rounds, budget_ms=budget_ms,
                                         seed=seed, on_step=say)
    rec.update(variants=outcomes, finished_at=timestamp(), machine=machine_info(), versions=versions())
    return rec


# ------------------------------------------------------------------------------------------------------ table
def _kernels(o: Mapping[str, Any]) -> str:
    fused = o.get("fused_kernels") or {}
    return ", ".join(f"{k.rpartition(':')[2]} {v}" for k, v in fused.items()) or "-"


def _cell(entry: Mapping[str, Any] | None, decode: bool, baseline: bool) -> str:
    """``12.3 ms`` / ``812 tok/s`` (side by side) with the speedup, its interval and the verdict of the independent
    re-timing (:func:`confirm`; the side-by-side verdict without one; the baseline: the A/A arm's ratio)."""
    if not entry:
        return "-"
    head = f"{entry['tokens_per_s']:.0f} tok/s" if decode else f"{entry['ms']:.3g} ms"
    v = entry.get("confirm") or entry.get("verdict")
    if baseline and entry.get("aa_ratio") is not None:
        return f"{head} (A/A {entry['aa_ratio']:.3f}x)"
    if baseline or not v:
        return head
    ci = v.get("speedup_ci")
    interval = f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""
    mark = " faster" if v.get("faster") else " slower" if v.get("slower") else ""
    return f"{head} ({v.get('speedup') or entry['speedup']:.3f}x{interval}{mark})"


def _verified(o: Mapping[str, Any]) -> str:
    if o.get("status") != "ok":
        return f"{o.get('status')}: {(o.get('error') or '')[:60]}"
    if "check_error" in o:
        return f"NO: {o['check_error'][:60]}"
    if o.get("verified"):
        return "yes"
    where = o.get("first_mismatch")
    return "NO: " + (f"token {where} differs" if where is not None else "prefill logits differ")


def decode_table(records: Sequence[Mapping[str, Any]], threads: Sequence[int]) -> str:
    """The Markdown table: per decoder and variant, verified, fused kernels after ORT, and per graph and thread count
    the prefill ms or the decode tokens/s with the speedup over ``ort``, its 90% interval and the verdict."""
    cols = [(g, n) for g in GRAPHS for n in threads]
    head = ["decoder", "variant", "verified", "fused kernels after ORT", *(f"{g} @{n}t" for g, n in cols)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rec in records:
        if rec.get("error"):
            lines.append(f"| {rec['id']} | - | {rec['error'][:80]} |" + " |" * (len(head) - 3))
            continue
        for name, o in rec["variants"].items():
            timing = o.get("timing", {})
            cells = [_cell(timing.get(g, {}).get(str(n)), GRAPHS[g][0] == 1, name == BASELINE)
                     if g in rec.get("graphs", []) else "n/a" for g, n in cols]
            same = f" (= {o['same_as']})" if "same_as" in o else ""
            lines.append("| " + " | ".join([rec["id"], name + same, _verified(o), _kernels(o), *cells]) + " |")
    return "\n".join(lines) + "\n"


def vs_genai_table(records: Sequence[Mapping[str, Any]], threads: Sequence[int]) -> str:
    """Per decoder, graphsub's head-to-head re-timing against the genai builder (:func:`confirm`) at each graph and
    thread count; "" when no record has one."""
    cols = [(g, n) for g in GRAPHS for n in threads]
    rows = []
    for rec in records:
        timing = (rec.get("variants") or {}).get(GRAPHSUB, {}).get("timing", {})
        cells = [_verdict_cell(timing.get(g, {}).get(str(n), {}).get(VS_GENAI)) for g, n in cols]
        if any(c != "-" for c in cells):
            rows.append("| " + " | ".join([rec["id"], *cells]) + " |")
    if not rows:
        return ""
    head = ["decoder", *(f"{g} @{n}t" for g, n in cols)]
    return "\n".join(["| " + " | ".join(head) + " |", "|" + "---|" * len(head), *rows]) + "\n"


def _verdict_cell(v: Mapping[str, Any] | None) -> str:
    if not v or v.get("speedup") is None:
        return "-"
    ci = v.get("speedup_ci")
    interval = f" [{ci[0]:.2f}-{ci[1]:.2f}]" if ci else ""
    mark = " faster" if v.get("faster") else " slower" if v.get("slower") else " not slower"
    return f"{v['speedup']:.3f}x{interval}{mark} (A/A {v.get('aa_ratio') or 1.0:.3f})"


def run_decode(families: Sequence[str], size: str, exporter: str, out_dir: Path, *, name: str = "decode",
               on_record: Callable[[dict[str, Any]], None] | None = None, **opts: Any) -> list[dict[str, Any]]:
    """:func:`run_decoder` for each family; writes ``<out_dir>/<name>.jsonl`` (one record per decoder, started
    over) and ``<name>.md`` (:func:`decode_table`, a note on skipped graphs).  The variants' files go to
    ``$GRAPHSUB_SUITE_WORK/<name>/<decoder>/`` (as the suite's; default ``~/.cache/graphsub/suite_work``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    jsonl = out_dir / f"{name}.jsonl"
    jsonl.unlink(missing_ok=True)
    root = Path(os.environ.get("GRAPHSUB_SUITE_WORK") or Path.home() / ".cache" / "graphsub" / "suite_work") / name
    records = []
    for family in families:
        work = root / f"{family}.{size}.{exporter}"
        shutil.rmtree(work, ignore_errors=True)
        rec = run_decoder(family, size, exporter, work, **opts)
        with jsonl.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec, default=str) + "\n")
        records.append(rec)
        if on_record is not None:
            on_record(rec)
    (out_dir / f"{name}.md").write_text(markdown(records, opts.get("threads", (1,))), encoding="utf-8")
    return records


def markdown(records: Sequence[Mapping[str, Any]], threads: Sequence[int]) -> str:
    """The Markdown file: a heading, :func:`decode_table` and what each decoder skipped or did not match."""
    lines = ["# Generation-level measure: greedy ids against the plain export, prefill ms and decode tokens/s", "",
             "Cells: the variant's prefill ms or decode tokens/s (side by side with the others), then its speedup "
             "over `ort`, the 90% interval and the verdict of its own re-timing against `ort` (fresh session groups "
             "with an A/A control in each).", "",
             decode_table(records, threads)]
    head_to_head = vs_genai_table(records, threads)
    if head_to_head:
        lines += ["", "graphsub's output re-timed head to head against the genai builder's (the builder in the "
                  "original's place, fresh session groups with its own A/A control): graphsub's speedup over it, "
                  "the 90% interval, the verdict.", "", head_to_head]
    for rec in records:
        if rec.get("skipped_graphs"):
            lines.append(f"- {rec['id']}: {', '.join(rec['skipped_graphs'])} not timed (the model holds "
                         f"{rec['positions']} positions)")
        if rec.get("torch_match") is False:
            lines.append(f"- {rec['id']}: the plain export's greedy ids differ from PyTorch's")
    return "\n".join(lines) + "\n"


__all__ = ["BASELINE", "DEFAULT_PEERS", "GENAI", "GRAPHS", "GRAPHSUB", "PREFILL", "PROMPT", "TRANSFORMER_TYPES",
           "VS_GENAI", "decode_table", "distinct", "fit_feeds", "fitted_session", "genai_outcome", "graphs_for",
           "inspect", "markdown", "prefill_error", "produce", "run_decode", "run_decoder", "time_graphs",
           "tokens_per_s", "transformer_meta", "vs_genai_table"]
