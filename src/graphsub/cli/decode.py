"""``graphsub bench decode``: the decoders' generation-level measure (see :mod:`graphsub.bench.decode`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from graphsub.cli.common import Exit, err, exits, fail, out, split_list


def _families(models: str | None, as_json: bool) -> list[str]:
    from graphsub.bench.decoders import DECODERS

    names = split_list(models) or list(DECODERS)
    unknown = [m for m in names if m not in DECODERS]
    if unknown:
        fail(Exit.USAGE, f"--models: unknown decoder(s) {', '.join(unknown)}; known: {', '.join(DECODERS)}", as_json)
    return names


def _sized(families: list[str], size: str, as_json: bool) -> None:
    """Exit with a usage error when a decoder of ``families`` has no config at ``size``."""
    from graphsub.bench.decoders import DECODERS

    lacking = [f for f in families if size not in DECODERS[f].sizes]
    if lacking:
        fail(Exit.USAGE, f"--size {size}: not defined for {', '.join(lacking)} (their sizes: "
                         f"{'; '.join(f'{f}: ' + ', '.join(DECODERS[f].sizes) for f in lacking)})", as_json)


def _peers(peers: str | None, as_json: bool) -> list[str]:
    from graphsub.bench.decode import DEFAULT_PEERS
    from graphsub.optimize.peers import PEERS

    if peers is not None and peers.strip() == "none":
        return []
    names = split_list(peers) or list(DEFAULT_PEERS)
    unknown = [p for p in names if p not in PEERS]
    if unknown:
        fail(Exit.USAGE, f"--peers: unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)} (or none)",
             as_json)
    return [p for p in names if p != "ort"]


def _variants(specs: list[str] | None, as_json: bool) -> dict[str, Path]:
    """``NAME=FILE`` pairs (``graphsub=FILE`` replaces graphsub's own run)."""
    extra: dict[str, Path] = {}
    for spec in specs or []:
        name, sep, file = spec.partition("=")
        if not sep or not name.strip() or not file.strip():
            fail(Exit.USAGE, f"--variant: expected NAME=FILE, got {spec!r}", as_json)
        if not Path(file).is_file():
            fail(Exit.BAD_INPUT, f"--variant {name}: no file {file}", as_json)
        extra[name.strip()] = Path(file)
    return extra


def _check(size: str, exporter: str, tokens: int, rounds: int, round_ms: float, budget: float | None,
           as_json: bool) -> None:
    from graphsub.bench.decoders import EXPORTERS, SIZES

    if size not in SIZES:
        fail(Exit.USAGE, f"--size: one of {', '.join(SIZES)}, got {size!r}", as_json)
    if exporter not in EXPORTERS:
        fail(Exit.USAGE, f"--exporter: one of {', '.join(EXPORTERS)}, got {exporter!r}", as_json)
    if tokens < 1 or rounds < 1 or round_ms <= 0 or (budget is not None and budget <= 0):
        fail(Exit.USAGE, "--tokens and --rounds must be at least 1, --round-ms and --budget positive", as_json)


def decode(*, models: str | None, size: str, exporter: str, tokens: int, threads: str | None, peers: str | None,
           variants: list[str] | None, budget: float | None, rounds: int, round_ms: float, seed: int,
           out_dir: Path | None, name: str | None, as_json: bool) -> None:
    """Run the measure on each decoder and print (or ``--json``) its table; writes ``OUT/NAME.jsonl`` and ``.md``."""
    from graphsub.bench.decode import decode_table, run_decode
    from graphsub.bench.suite.measure import parse_threads

    _check(size, exporter, tokens, rounds, round_ms, budget, as_json)
    try:
        counts = parse_threads(threads or "1,all")
    except ValueError as e:
        fail(Exit.USAGE, f"--threads: {e}", as_json)
    families, peer_names, extra = _families(models, as_json), _peers(peers, as_json), _variants(variants, as_json)
    _sized(families, size, as_json)
    name, out_path = name or "decode", out_dir or Path("results")
    progress = Progress(TextColumn("[bold]decode[/] {task.description}"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=err, transient=True, disable=as_json)
    with progress, exits(as_json, (OSError, Exit.CANNOT_WRITE)):
        task = progress.add_task(families[0], total=len(families))
        current = {"family": families[0]}

        def step(what: str) -> None:
            progress.update(task, description=f"{current['family']}: {what}")

        def advance(rec: dict[str, Any]) -> None:
            progress.advance(task)
            current["family"] = families[min(families.index(rec["family"]) + 1, len(families) - 1)]

        records = run_decode(families, size, exporter, out_path, name=name, on_record=advance, peers=peer_names,
                             graphsub="graphsub" not in extra, extra=extra, tokens=tokens, threads=counts,
                             rounds=rounds, budget_ms=round_ms, budget_s=budget, seed=seed, on_step=step)
    if as_json:
        print(json.dumps({"results": str(out_path / f"{name}.jsonl"), "markdown": str(out_path / f"{name}.md"),
                          "threads": counts, "rows": json_rows(records)}, indent=2, default=str))
        return
    out.print(decode_table(records, counts), highlight=False, markup=False, soft_wrap=True)
    out.print(f"results: {out_path / name}.jsonl; table: {out_path / name}.md", soft_wrap=True)


def json_rows(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per decoder and variant: status, verified, tokens_match, prefill_err, fused kernels and per graph
    and thread count ``ms``, ``tokens_per_s``, ``speedup``, ``speedup_ci``, ``aa_ratio``, ``faster``
    (:func:`_timing_row`)."""
    rows = []
    for rec in records:
        if rec.get("error"):
            rows.append({"decoder": rec["id"], "error": rec["error"]})
        for variant, o in rec.get("variants", {}).items():
            timing = {g: {n: _timing_row(e) for n, e in per.items()} for g, per in o.get("timing", {}).items()}
            rows.append({"decoder": rec["id"], "variant": variant, "status": o["status"], "error": o.get("error"),
                         "verified": o.get("verified", False), "tokens_match": o.get("tokens_match"),
                         "prefill_err": o.get("prefill_err"), "fused_kernels": o.get("fused_kernels"),
                         "same_as": o.get("same_as"), "timing": timing})
    return rows


def _timing_row(entry: dict[str, Any]) -> dict[str, Any]:
    """The side-by-side ``ms`` and tokens/s; the speedup, interval, A/A ratio and verdict of the independent
    re-timing (the side-by-side ones without it)."""
    v = entry.get("confirm") or entry.get("verdict") or {}
    speedup = v.get("speedup", entry.get("speedup"))
    return {"ms": entry["ms"], "tokens_per_s": entry.get("tokens_per_s"), "speedup": speedup,
            "speedup_ci": v.get("speedup_ci"), "aa_ratio": v.get("aa_ratio", entry.get("aa_ratio")),
            "faster": v.get("faster")}


__all__ = ["decode", "json_rows"]
