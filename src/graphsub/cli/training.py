"""``graphsub training ...``: training graphs (MetaFlow Sec. 6.3); ``bench`` times full training steps of the
original and the optimized model in ONNX Runtime and PyTorch, ``grads`` checks gradients against torch.autograd."""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from graphsub.cli.common import Exit, JsonOpt, SeedOpt, err, exits, fail, wide
from graphsub.optimize.decide import MIN_SPEEDUP

training_app = typer.Typer(help="Training graphs: forward and backward as one graph, optimized like an inference "
                                "one and run in ONNX Runtime or PyTorch.", no_args_is_help=True)

RUNTIMES = ("ort", "torch")


def _models(text: str, as_json: bool) -> list[str]:
    from graphsub.bench.train_models import TRAIN_MODELS

    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in TRAIN_MODELS]
    if unknown or not names:
        fail(Exit.USAGE, f"unknown model(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(TRAIN_MODELS)}",
             as_json)
    return names


def _ints(text: str, what: str, as_json: bool) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if part == "all":
            out.append(os.cpu_count() or 1)
            continue
        if not part.isdigit() or int(part) < 1:
            fail(Exit.USAGE, f"{what}: expected positive integers (or 'all' for threads), got {part!r}", as_json)
        out.append(int(part))
    return list(dict.fromkeys(out))


def _f(x: Any, spec: str = ".3g") -> str:
    return "-" if x is None else format(x, spec)


@training_app.command("bench")
def bench_cmd(
    models: Annotated[str, typer.Option("--models", help="Comma-separated: squeezenet, inception_v3, resnet50, "
                                                         "encoder (PyTorch modules with torchvision's structure; "
                                                         "random weights).")] = "squeezenet",
    batch: Annotated[str, typer.Option("--batch", help="Batch sizes, comma-separated.")] = "8",
    image: Annotated[int | None, typer.Option("--image", help="Image size (default: each model's own, small "
                                                              "enough for a CPU).")] = None,
    threads: Annotated[str, typer.Option("--threads", help="Thread counts, comma-separated ('all': every "
                                                           "core).")] = "1,all",
    runtimes: Annotated[str, typer.Option("--runtimes", help="ort, torch or both (comma-separated).")] = "ort,torch",
    budget: Annotated[float, typer.Option("--budget", help="Optimization budget per case (s): the whole optimize "
                                                           "call for onnxruntime, the search for PyTorch.")] = 60.0,
    groups: Annotated[int, typer.Option("--groups", min=2, help="Session groups of the timing: fresh copies of "
                                                                "the original, the optimized model and the original "
                                                                "again (the A/A control) each.")] = 5,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Paired timing rounds per session "
                                                                "group.")] = 2,
    steps: Annotated[int, typer.Option("--steps", min=1, help="PyTorch: at least this many training steps per "
                                                              "round (their median is the round's time).")] = 3,
    round_ms: Annotated[float, typer.Option("--round-ms", min=1.0, help="Time budget of a round of one variant "
                                                                        "(ms).")] = 200.0,
    min_speedup: Annotated[float, typer.Option("--min-speedup", help="Declared faster only above this "
                                                                     "speedup.")] = MIN_SPEEDUP,
    out_path: Annotated[Path | None, typer.Option("--out", help="Also write the results (JSON) here.")] = None,
    seed: SeedOpt = 0,
    as_json: JsonOpt = False,
) -> None:
    """Time a full training step (forward, backward, SGD update) of the original and the optimized model.

    onnxruntime: the training graph of the exported model is optimized by `graphsub optimize --training`'s
    pipeline and both graphs run whole steps (the update in numpy). PyTorch: the user's module with autograd
    against the searched forward graph emitted as a module (its weights stay parameters; autograd
    differentiates it), and the emitted unoptimized graph, which shows what emission alone changes.
    "Faster" is a verdict (graphsub.optimize.decide): session groups of fresh units with an A/A control in each, and
    a t-test over the groups whose false-positive rate is 5%; the speedup comes with its 90% interval.

    --json keys per case: verified, max_grad_abs_diff, faster, speedup_train (original / optimized step time),
    speedup_ci, aa_ratio, rounds, sessions, confirmation (the whole verdict).
    Exit codes: 0 done, 1 a case not verified, 2 usage, 3 a model that cannot be differentiated.
    """
    from graphsub.bench.training_run import ort_case, prepare, torch_case

    names = _models(models, as_json)
    batches = _ints(batch, "--batch", as_json)
    counts = _ints(threads, "--threads", as_json)
    which = [r.strip() for r in runtimes.split(",") if r.strip()]
    if not which or any(r not in RUNTIMES for r in which):
        fail(Exit.USAGE, f"--runtimes: choose from {', '.join(RUNTIMES)}, got {runtimes!r}", as_json)
    cases: list[dict[str, Any]] = []

    def save() -> dict[str, Any]:  # after every case: a long run that stops early keeps what it measured
        result = {"cases": cases, "load_avg": list(os.getloadavg()), "cpus": os.cpu_count()}
        if out_path is not None:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = out_path.with_name(out_path.name + ".tmp")
            tmp.write_text(json.dumps(result, indent=2))
            os.replace(tmp, out_path)
        return result

    with exits(as_json):
        for name in names:
            for b in batches:
                case = prepare(name, batch=b, image=image, seed=seed)
                for t in counts:
                    if "ort" in which:
                        err.print(f"{name} batch {b}, {t} thread(s): onnxruntime ...")
                        cases.append(ort_case(case, threads=t, budget_s=budget, seed=seed, groups=groups,
                                              rounds=rounds, budget_ms=round_ms, min_speedup=min_speedup))
                        save()
                    if "torch" in which:
                        err.print(f"{name} batch {b}, {t} thread(s): PyTorch ...")
                        cases.append(torch_case(case, threads=t, budget_s=budget, seed=seed, groups=groups,
                                                rounds=rounds, steps=steps, budget_ms=round_ms,
                                                min_speedup=min_speedup))
                        save()
    result = save()
    code = Exit.OK if all(c["verified"] for c in cases) else Exit.NOT_EQUIVALENT
    if as_json:
        print(json.dumps({**result, "exit_code": int(code)}, indent=2))
    else:
        _print(cases)
    raise typer.Exit(int(code))


def _ci(c: dict[str, Any]) -> str:
    ci = c.get("speedup_ci")
    return "-" if not ci else f"{ci[0]:.3f}-{ci[1]:.3f}x"


def _print(cases: list[dict[str, Any]]) -> None:
    t = Table("model", "batch", "runtime", "threads", "original ms", "optimized ms", "speedup", "90% CI", "A/A",
              "faster", "sessions", "verified", "max |grad diff|", "substitutions",
              title="full training step (forward, backward, SGD); faster: the verdict (90% CI above 1.0x, beyond "
                    "the A/A control: the original against fresh copies of itself)")
    for c in cases:
        subs = ", ".join(sorted(set(c["applied"]))) or "-"
        t.add_row(c["model"], str(c["batch"]), c["runtime"], str(c["threads"]), _f(c["step_ms_original"], ".1f"),
                  _f(c["step_ms_optimized"], ".1f"), _f(c["speedup_train"], ".3f") + "x", _ci(c),
                  _f(c.get("aa_ratio"), ".3f") + "x", "yes" if c.get("faster") else "no",
                  f"{c.get('sessions', 0)} ({c.get('rounds', 0)} rounds)", "yes" if c["verified"] else "NO",
                  _f(c["max_grad_abs_diff"]), subs[:60])
    wide(180).print(t)
    for c in cases:
        if c.get("reason"):
            err.print(f"{c['model']} batch {c['batch']}, {c['runtime']}, {c['threads']} thread(s): {c['reason']}",
                      highlight=False)
    emitted = [c["speedup_emitted_original"] for c in cases
               if c["runtime"] == "pytorch" and c.get("speedup_emitted_original") is not None]
    if emitted:
        ratio = statistics.median(emitted)
        err.print(f"PyTorch: the emitted unoptimized graph runs at {ratio:.3f}x the module's speed (median over "
                  "cases): what emission alone changes")


__all__ = ["training_app"]
