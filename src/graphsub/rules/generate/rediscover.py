"""Which of TASO's shipped rules (``graph_subst.pb``) does the generator rediscover, and why not?

Every pb rule is translated into a :class:`~.prune.Pair` over the generator's templates and
variables (TASO's variable ids -1..-20 are :data:`~.templates.TASO_VARS` in order) and compared
with the generated substitutions up to renaming (:func:`~.prune.canonical_key`).  A rule that is
not among them is classified:

* ``not expressible`` -- an operator or attribute outside the templates;
* ``not enumerated`` -- a side is not a graph the enumeration keeps (more operators than the
  threshold, a duplicated tensor, ...): its fingerprint is not among the enumerated ones;
* ``not equivalent here`` -- the sides' outputs differ on the fingerprint inputs under the
  generator's semantics;
* ``pruned`` -- an equivalent pair was generated but removed by a pruning stage (the stage is
  named), or the pair was never formed because both sides were paired with a third graph of
  the same fingerprint instead (TASO's pairing with the first graph of a fingerprint).

>>> from graphsub.rules.generate.enumerate import EnumConfig
>>> pairs = pb_pairs(EnumConfig())
>>> sum(1 for p in pairs.values() if isinstance(p, Pair)) > 100
True
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from graphsub.errors import RuleError
from graphsub.rules.generate.enumerate import EnumConfig, GraphCode, output_digests
from graphsub.rules.generate.fingerprint import graph_digest, random_inputs
from graphsub.rules.generate.prune import Pair, canonical_key
from graphsub.rules.generate.templates import Meta
from graphsub.rules.taso_pb import default_pb_path, read_collection
from graphsub.rules.taso_pb_spec import TOp, normalize


def _template_for(cfg: EnumConfig, op: TOp, metas: Sequence[Meta],
                  weights: Sequence[bool]) -> tuple[int, tuple[Meta, ...]]:
    names = list(cfg.templates)
    k = op.kind
    cands: list[str] = []
    if k == "conv2d":
        if op.attr("strides") != (1, 1) or op.attr("pads") != "SAME":
            raise RuleError(f"conv2d with strides {op.attr('strides')} / {op.attr('pads')} (templates: 1, SAME)")
        suffix = "r" if op.attr("act") == "relu" else ""
        cands = [n for n in names if n.startswith("conv") and (n.endswith("r") == bool(suffix))]
    elif k == "matmul":
        if op.attr("act") != "none":
            raise RuleError(f"matmul with fused {op.attr('act')} (no template)")
        cands = ["matmul"]
    elif k == "concat":
        cands = [f"concat{op.attr('axis')}_{op.attr('numdim', metas[0].rank)}d"]
    elif k == "split":
        cands = [f"split{op.attr('axis')}"]
    else:
        cands = [k]
    for n in cands:
        if n in names:
            t = cfg.template_objs[names.index(n)]
            out = t.infer(metas, weights)
            if out is not None and len(out) == op.num_outputs:
                return names.index(n), out
    raise RuleError(f"{k} on {[m.shape for m in metas]}: no template applies")


def _side(cfg: EnumConfig, side: Sequence[TOp], live: frozenset[int] | None) -> tuple[GraphCode, dict[int, int]]:
    """The side as a GraphCode and a map (op index in the side) -> its op index in the code."""
    nv = len(cfg.variables)
    metas: list[Meta] = [Meta(v.shape) for v in cfg.variables]
    weights = [v.weight for v in cfg.variables]
    ops: list[tuple[int, tuple[int, ...]]] = []
    nouts: list[int] = []
    first_tensor: dict[int, int] = {}
    where: dict[int, int] = {}
    for i, op in enumerate(side):
        if live is not None and i not in live:
            continue
        ins = tuple(-j - 1 if j < 0 else first_tensor[j] + k for j, k in op.inputs)
        if any(j >= nv + 200 or j < 0 for j in ins):
            raise RuleError("variable id out of range")
        ti, out = _template_for(cfg, op, [metas[j] for j in ins], [j < nv and weights[j] for j in ins])
        first_tensor[i] = len(metas)
        where[i] = len(ops)
        ops.append((ti, ins))
        nouts.append(len(out))
        metas.extend(out)
        weights.extend([False] * len(out))
    return GraphCode(tuple(ops), nv, tuple(nouts)), where


def pb_pairs(cfg: EnumConfig, path: str | Path | None = None) -> dict[int, Pair | str]:
    """Each pb rule (by file index) as a Pair over ``cfg``, or the reason it cannot be one."""
    coll = read_collection(default_pb_path() if path is None else path, lenient=True)
    out: dict[int, Pair | str] = {}
    for r in coll.rules:
        try:
            spec = normalize(r.index, r)
            a, wa = _side(cfg, spec.src, None)
            b, wb = _side(cfg, spec.dst, spec.dst_live)
            mapping = []
            for (s, sk), (d, dk) in spec.outputs:
                if d < 0:
                    raise RuleError("a mapped output is a variable")
                mapping.append((a.tensor_id(wa[s], sk), b.tensor_id(wb[d], dk)))
            out[r.index] = Pair(a, b, tuple(mapping))
        except (RuleError, KeyError) as e:
            out[r.index] = f"not expressible: {e}"
    return out


@dataclass(frozen=True)
class Rediscovery:
    """Per pb rule: ``found`` or the reason it is missing (see the module docstring)."""

    status: Mapping[int, str]

    @property
    def found(self) -> list[int]:
        return [i for i, s in self.status.items() if s == "found"]

    def reasons(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for s in self.status.values():
            if s != "found":
                key = s.split(":")[0]
                out[key] = out.get(key, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def rediscover(cfg: EnumConfig, kept: Sequence[Pair], stage_keys: Mapping[str, set[tuple[tuple[str, str], ...]]],
               enumerated_fps: set[int], path: str | Path | None = None) -> Rediscovery:
    """Classify every pb rule.  ``kept``: the generated pairs; ``stage_keys``: canonical keys of the
    pairs present at earlier stages (``confirmed``, ``renaming``), to name where one was pruned;
    ``enumerated_fps``: fingerprints of all enumerated graphs."""
    final = {canonical_key(cfg, p) for p in kept}
    inputs = random_inputs(cfg.variables, cfg.seed)
    status: dict[int, str] = {}
    for idx, p in sorted(pb_pairs(cfg, path).items()):
        if isinstance(p, str):
            status[idx] = p
            continue
        key = canonical_key(cfg, p)
        if key in final:
            status[idx] = "found"
            continue
        da, db = output_digests(cfg, p.a, inputs), output_digests(cfg, p.b, inputs)
        fa, fb = graph_digest(da.values()), graph_digest(db.values())
        if any(da[x] != db[y] for x, y in p.outputs):
            status[idx] = "not equivalent here: outputs differ under the generator's semantics"
        elif fa not in enumerated_fps or fb not in enumerated_fps:
            which = [n for n, f in (("source", fa), ("target", fb)) if f not in enumerated_fps]
            status[idx] = (f"not enumerated: the {' and '.join(which)} side is not an enumerated graph "
                           f"(sizes {len(p.a.ops)}/{len(p.b.ops)} ops; duplicated tensor or over the threshold)")
        elif fa != fb:
            status[idx] = "not enumerated: the sides have extra unmapped outputs, so their fingerprints differ"
        else:
            for stage in ("renaming", "confirmed"):
                if key in stage_keys.get(stage, set()):
                    nxt = {"renaming": "common-subgraph", "confirmed": "renaming"}[stage]
                    status[idx] = f"pruned: by the {nxt} stage"
                    break
            else:
                status[idx] = ("pruned: no pair of this form reached deduplication (never paired directly -- both "
                               "sides were paired with the first graph of their fingerprint -- or only in a "
                               "variable order neither side respects)")
    return Rediscovery(status)


__all__ = ["Rediscovery", "pb_pairs", "rediscover"]
