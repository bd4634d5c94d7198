"""``graphsub rules ...``: list, show, verify and count matches of substitution rules."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table

from graphsub.cli.common import Exit, JsonOpt, SeedOpt, confirm_output, err, exits, fail, load_graph, out
from graphsub.errors import GraphsubError

rules_app = typer.Typer(help="Substitution rules: list, show, verify, count matches, generate (TASO), prove (Z3).",
                        no_args_is_help=True)

SetArg = Annotated[str, typer.Argument(help="Rule set: builtin, taso-pb, taso151, ocggs157, metaflow, algebra, "
                                            "cpu, ort, generated, default; comma-separated sets are combined.")]
PathOpt = Annotated[Path | None, typer.Option(
    "--path", help="TASO graph_subst.pb to read (default: $GRAPHSUB_TASO_PB, else the copy shipped in the package).")]


def _rules(set_name: str, path: Path | None, as_json: bool) -> list[Any]:
    from graphsub.rules.library import resolve_rules

    with exits(as_json, default=Exit.USAGE if path is None else Exit.BAD_INPUT):  # unknown name: usage; bad file: 3
        return resolve_rules(set_name, path)


@rules_app.command("list")
def rules_list(set_name: SetArg = "default", path: PathOpt = None, as_json: JsonOpt = False) -> None:
    """List the rules of a set (name, origin, exact, where defined)."""
    rules = _rules(set_name, path, as_json)
    rows = [{"name": r.name, "origin": r.origin, "exact": r.exact, "reason": r.reason, "tags": list(r.tags),
             "location": r.location, "doc": r.doc.splitlines()[0] if r.doc else ""} for r in rules]
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("name", "origin", "exact", "doc", title=f"{set_name}: {len(rows)} rules")
    for r in rows:
        table.add_row(r["name"], r["origin"], "yes" if r["exact"] else f"no ({r['reason']})", r["doc"])
    out.print(table)


@rules_app.command("show")
def rules_show(name: Annotated[str, typer.Argument(help="Rule name.")], path: PathOpt = None,
               as_json: JsonOpt = False) -> None:
    """Show a rule: source pattern, constraints, provenance, and its first example before/after."""
    from graphsub.ir.text import to_text
    from graphsub.rules.apply import apply
    from graphsub.rules.library import find_rule
    from graphsub.rules.match import find_matches
    from graphsub.rules.soundness.numeric import instantiate

    try:
        rule = find_rule(name, path)
    except GraphsubError as e:  # an unknown rule name is a usage error; an unreadable rules file, bad input
        fail(Exit.USAGE if path is None else Exit.BAD_INPUT, str(e), as_json)
        return
    before = after = ""
    if rule.examples:
        try:
            src = instantiate(rule.source, rule.examples[0], f"{rule.name}_source")
            before = to_text(src)
            full = {n for n in src.nodes if not src.nodes[n].sig.opdef.leaf}
            ms = [m for m in find_matches(src, rule.on_examples()) if set(m.node_ids) == full]
            after = to_text(apply(src, ms[0]).graph) if ms else "(rule does not match its example)"
        except GraphsubError as e:
            after = f"(cannot instantiate: {e})"
    data = {"name": rule.name, "origin": rule.origin, "exact": rule.exact, "reason": rule.reason,
            "location": rule.location, "doc": rule.doc, "tags": list(rule.tags), "source": str(rule.source),
            "where": [w.text for w in rule.where], "examples": len(rule.examples),
            "example_before": before, "example_after": after}
    if as_json:
        print(json.dumps(data, indent=2))
        return
    out.print(f"[bold]{rule.name}[/] ({rule.origin}, {'exact' if rule.exact else 'NOT exact: ' + rule.reason}) "
              f"at {rule.location}")
    if rule.doc:
        out.print(rule.doc)
    out.print("[bold]source pattern[/]\n" + str(rule.source))
    for w in rule.where:
        out.print(f"where: {w.text}")
    if before:
        out.print("[bold]example source[/]\n" + before)
        out.print("[bold]after applying[/]\n" + after)


@rules_app.command("verify")
def rules_verify(set_name: SetArg = "default", path: PathOpt = None, seed: SeedOpt = 0,
                 as_json: JsonOpt = False) -> None:
    """Check every rule numerically on its examples (exit 1 if an exact rule fails)."""
    from graphsub.rules.soundness.numeric import verify_rule

    rules = _rules(set_name, path, as_json)
    reports = []
    with Progress(console=err, transient=True, disable=as_json) as progress:
        task = progress.add_task(f"verifying {len(rules)} rules", total=len(rules))
        for r in rules:
            reports.append((r, verify_rule(r, seed)))
            progress.advance(task)
    rows = [{"name": r.name, "passed": rep.passed, "exact": r.exact, "mode": rep.mode, "examples": rep.examples,
             "max_abs_diff": rep.max_abs_diff, "reason": rep.reason} for r, rep in reports]
    failed = [row for row in rows if row["exact"] and not row["passed"]]
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        table = Table("rule", "result", "mode", "examples", "reason", title=f"{set_name}: verification")
        for row in rows:
            verdict = "pass" if row["passed"] else ("[red]FAIL[/]" if row["exact"] else "fail (not exact)")
            table.add_row(row["name"], verdict, row["mode"], str(row["examples"]), row["reason"])
        out.print(table)
        out.print(f"{sum(r['passed'] for r in rows)}/{len(rows)} passed; {len(failed)} exact rule(s) failed")
    raise typer.Exit(int(Exit.NOT_EQUIVALENT if failed else Exit.OK))


@rules_app.command("match")
def rules_match(model: Annotated[str, typer.Argument(help="An .onnx file or zoo:NAME.")],
                set_name: SetArg = "default", path: PathOpt = None, all_rules: Annotated[bool, typer.Option(
                    "--all", help="Also list rules with no match.")] = False, as_json: JsonOpt = False) -> None:
    """Count the matches (length-1 substitutions) of each rule in a model."""
    from graphsub.rules.match import find_matches

    g = load_graph(model, None, as_json)
    rules = _rules(set_name, path, as_json)
    counts: dict[str, int] = {}
    t0 = time.perf_counter()
    for r in rules:
        n = len(find_matches(g, r))
        if n or all_rules:
            counts[r.name] = n
    seconds = time.perf_counter() - t0
    if as_json:
        print(json.dumps(counts, indent=2))
        return
    table = Table("rule", "matches", title=f"{g.name}: {sum(counts.values())} matches of {len(rules)} rules "
                                            f"({seconds * 1e3:.0f} ms)")
    for k, v in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        table.add_row(k, str(v))
    out.print(table)


# ----------------------------------------------------------------------------- generate / prove (TASO)


@rules_app.command("generate")
def rules_generate(
    output: Annotated[Path, typer.Option("-o", "--output", help="Where to write the substitutions (rules.json).")],
    ops: Annotated[str, typer.Option("--ops", help="Comma-separated operator templates or aliases (taso = TASO's "
                                     "whole set; conv, pool, const, concat, split; or names like matmul, add, mul, "
                                     "relu, transpose, smul, conv3x3, conv3x3r, avgpool3x3, split0 ...).")] = "taso",
    max_ops: Annotated[int, typer.Option("--max-ops", help="Size threshold: operators per graph (TASO: 3).")] = 3,
    shards: Annotated[int, typer.Option("--shards", help="Split the enumeration into this many shards.")] = 64,
    workers: Annotated[int, typer.Option("--workers", help="Worker processes (--executor process).")] = 0,
    executor: Annotated[str, typer.Option("--executor", help="Where every stage runs (enumeration shards, confirm, "
                                          "renaming keys, verification): serial, process (local worker processes) "
                                          "or ray (a Ray cluster; optional extra `pip install -e .[ray]`). The "
                                          "output is the same file on each.")] = "process",
    ray_address: Annotated[str | None, typer.Option("--ray-address", help="--executor ray: the cluster to use "
                                                    "(e.g. ray://head:10001 or head:6379; default: $RAY_ADDRESS, "
                                                    "else a local Ray started for this command).")] = None,
    checkpoint: Annotated[Path | None, typer.Option(
        "--checkpoint", help="Directory for finished shards; a rerun skips them (resume).")] = None,
    tests: Annotated[int, typer.Option("--tests", help="Extra random inputs a pair must agree on to be kept.")] = 3,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Generate substitutions with TASO's algorithm (SOSP'19, Algorithm 1).

    Enumerates every graph of up to --max-ops operators over the templates and TASO's input
    tensors, skips duplicated computation, fingerprints each graph on random integers modulo a
    prime (ReLU replaced by x*(x+1)+1), pairs graphs with equal fingerprints, prunes pairs that
    are the same up to input renaming, confirms one pair per class on --tests more inputs, prunes
    common subgraphs, checks every emitted rule
    numerically and writes rules.json (load it with `rules prove --file` or as the `generated`
    set when installed as src/graphsub/rules/library/generated.json.gz).

    Exit codes: 0 written; 2 bad arguments (unknown operators, --max-ops out of range, unknown
    executor, checkpoint of another configuration, ray missing); 4 cannot write the output.
    """
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from graphsub.rules.generate.enumerate import EnumConfig
    from graphsub.rules.generate.pipeline import generate
    from graphsub.rules.generate.templates import resolve_ops

    try:
        templates = resolve_ops(ops.split(","))
        if not templates:
            raise KeyError("no operator templates given")
        cfg = EnumConfig(templates=templates, max_ops=max_ops, seed=seed)
    except (KeyError, ValueError) as e:
        fail(Exit.USAGE, str(e).strip("'\""), as_json)
        return
    confirm_output(None, output, as_json)
    t0 = time.perf_counter()
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, transient=True, disable=as_json) as progress:
        tasks: dict[str, Any] = {}

        def report(stage: str, advance: int, total: int | None) -> None:
            if stage not in tasks:
                tasks[stage] = progress.add_task(stage, total=total)
            progress.update(tasks[stage], advance=advance)

        try:
            gen = generate(cfg, num_shards=shards, executor=executor, workers=workers or None,
                           checkpoint=checkpoint, tests=tests, progress=report, ray_address=ray_address)
        except GraphsubError as e:
            fail(Exit.USAGE, str(e), as_json)
            return
    from graphsub.optimize.output import write_bytes

    try:  # atomically: a reader sees the old file or the new one
        write_bytes((json.dumps(gen.doc, indent=1) + "\n").encode(), output, suffix=".json")
    except (OSError, GraphsubError) as e:
        fail(Exit.CANNOT_WRITE, f"{output}: {e}", as_json)
    summary = {"output": str(output), "counts": gen.counts, "dropped": gen.stats.dropped,
               "seconds": {k: round(v, 3) for k, v in gen.seconds.items()},
               "wall_seconds": round(time.perf_counter() - t0, 3)}
    if as_json:
        print(json.dumps(summary, indent=2))
        return
    table = Table("stage", "count", title=f"generated {len(gen.doc['substitutions'])} substitutions -> {output}")
    for k, v in gen.counts.items():
        table.add_row(k, str(v))
    out.print(table)
    for why, n in sorted(gen.stats.dropped.items()):
        out.print(f"  dropped {n}: {why}")


@rules_app.command("prove")
def rules_prove(
    set_name: SetArg = "generated",
    file: Annotated[Path | None, typer.Option("--file", help="Prove the rules of a rules.json written by "
                                              "`rules generate` instead of a named set.")] = None,
    path: PathOpt = None,
    timeout_ms: Annotated[int, typer.Option("--timeout-ms", help="Z3 time limit per rule.")] = 10_000,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Prove rules from TASO's operator axioms with Z3 (proven / refuted / unknown).

    The axioms (TASO's Table 2) are first checked on small concrete tensors with the numpy
    reference ops.  Each rule is proven on its first example instance; ops the axioms do not
    describe give `unknown` with the reason; `refuted` needs a Z3 counter-model of the axioms
    confirmed by a numeric counterexample.

    Exit codes: 0 no rule refuted and all axioms hold; 1 a rule was refuted or an axiom failed
    its concrete check; 3 unknown set or malformed rules file.
    """
    from graphsub.rules.soundness.axioms import check_axioms
    from graphsub.rules.soundness.smt import prove_rule, summarize

    if file is not None:
        from graphsub.rules.generate.emit import load_generated_json

        try:
            rules = load_generated_json(file)
        except GraphsubError as e:
            fail(Exit.BAD_INPUT, str(e), as_json)
            return
        label = str(file)
    else:
        rules = _rules(set_name, path, as_json)
        label = set_name
    t0 = time.perf_counter()
    axiom_checks = check_axioms(seed)
    bad_axioms = [a for a in axiom_checks if not a.ok]
    results = []
    with Progress(console=err, transient=True, disable=as_json) as progress:
        task = progress.add_task(f"proving {len(rules)} rules", total=len(rules))
        for r in rules:
            results.append(prove_rule(r, timeout_ms, seed))
            progress.advance(task)
    summary = {**summarize(results), "wall_seconds": round(time.perf_counter() - t0, 3), "set": label,
               "axioms": len(axiom_checks), "axioms_failed": [a.name for a in bad_axioms]}
    refuted = [r for r in results if r.status == "refuted"]
    if as_json:
        print(json.dumps({"summary": summary, "rules": [r.to_dict() for r in results]}, indent=2))
    else:
        table = Table("rule", "result", "seconds", "reason", title=f"{label}: proofs from {len(axiom_checks)} axioms")
        for pr in results:
            color = {"proven": "green", "refuted": "red"}.get(pr.status, "yellow")
            table.add_row(pr.name, f"[{color}]{pr.status}[/]", f"{pr.seconds:.2f}", pr.reason)
        out.print(table)
        out.print(f"{summary['proven']} proven, {summary['refuted']} refuted, {summary['unknown']} unknown "
                  f"of {len(results)} in {summary['wall_seconds']:.1f} s; axioms failing their concrete check: "
                  f"{summary['axioms_failed'] or 'none'}")
    raise typer.Exit(int(Exit.NOT_EQUIVALENT if refuted or bad_axioms else Exit.OK))

__all__ = ["rules_app"]
