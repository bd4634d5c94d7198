"""``graphsub rules ...``: list, show, verify and count matches of substitution rules."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table

from graphsub.cli_common import Exit, JsonOpt, SeedOpt, _fail, _load_or_exit, err, out
from graphsub.errors import GraphsubError

rules_app = typer.Typer(help="Substitution rules: list, show, verify, count matches.", no_args_is_help=True)

SetArg = Annotated[str, typer.Argument(help="Rule set: builtin, taso-pb, taso151, ocggs157, metaflow, algebra, "
                                            "cpu, ort, default.")]
PathOpt = Annotated[Path | None, typer.Option(
    "--path", help="TASO graph_subst.pb to read (default: $GRAPHSUB_TASO_PB or ../shared/data/taso/graph_subst.pb).")]


def _rules(set_name: str, path: Path | None, as_json: bool) -> list[Any]:
    from graphsub.rules.library import get_set

    try:
        return get_set(set_name, path)
    except GraphsubError as e:
        _fail(Exit.BAD_INPUT, str(e), as_json)
    return []


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
    from graphsub.rules.verify.numeric import instantiate

    try:
        rule = find_rule(name, path)
    except GraphsubError as e:
        _fail(Exit.BAD_INPUT, str(e), as_json)
        return
    before = after = ""
    if rule.examples:
        try:
            src = instantiate(rule.source, rule.examples[0], f"{rule.name}_source")
            before = to_text(src)
            full = {n for n in src.nodes if not src.nodes[n].sig.opdef.leaf}
            ms = [m for m in find_matches(src, rule) if set(m.node_ids) == full]
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
    from graphsub.rules.verify.numeric import verify_rule

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

    g = _load_or_exit(model, None, as_json)
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


__all__ = ["rules_app"]
