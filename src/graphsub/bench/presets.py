"""Named experiment grids after OCGGS §6 (Fang et al., VLDB 2020).

=================  ===============================================================================
preset             grid (defaults; every field can be overridden)
=================  ===============================================================================
``table3``         Table 3: the 7 DNNs of Table 2 -- Inception-v3 (138 ops), ResNet 8 blocks (40),
                   ResNeXt-50 (86), NasNet-A (zoo: 383, Table 2 says 293), BERT 8 layers (113), SRU
                   1 step (11), NasRNN 5 steps (230); K=10; ``roofline:p100`` and ``measured``
                   costs; 1-hour cut-off
``fig4``           Fig. 4: ResNet 2/4/6/8 blocks and InceptionE 1/2/3/4 blocks at K=10
``fig5``           Fig. 5: 6 ResNet blocks and 3 InceptionE blocks with K in {5, 10, 15, 20, 25}
``small-exact``    ResNet 2/4 blocks and SRU at K in {4, 6}: ENU's optimum, and who reaches it
=================  ===============================================================================

All use rule set ``ocggs157`` (OCGGS's 24 built-ins + TASO's 133) and, by default, every
algorithm registered in :data:`graphsub.search.ALGORITHMS` when the grid is built (so pruning,
DPP and sampling join once registered).  TASO/MetaFlow run with OCGGS's settings (alpha 1.05,
MetaFlow split threshold 30).  Repeat ``r`` uses seed ``seed + r``.

>>> runs = PRESETS["fig4"].runs(algos=["greedy"], cutoff_s=5)
>>> [r.model for r in runs][:4], {r.k for r in runs}, {r.cutoff_s for r in runs}
(['resnet:blocks=2', 'resnet:blocks=4', 'resnet:blocks=6', 'resnet:blocks=8'], {10}, {5.0})
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from graphsub.bench.harness import Run

#: OCGGS §6.1: alpha 1.05 for MF and TS (as in TASO and MetaFlow), MetaFlow's split threshold 30,
#: Q = 20 and eta = 1 for Sampling.
OCGGS_PARAMS: Mapping[str, Mapping[str, Any]] = MappingProxyType({
    "taso": {"alpha": 1.05},
    "metaflow": {"alpha": 1.05, "threshold": 30},
    "sampling": {"q": 20, "eta": 1},
})


def registered_algorithms() -> list[str]:
    """The algorithms :func:`graphsub.search.search` knows now."""
    from graphsub.search import ALGORITHMS

    return list(ALGORITHMS)


@dataclass(frozen=True)
class Preset:
    """A grid: models x cost models x K x algorithms x repeats (see :meth:`runs`)."""

    name: str
    description: str
    models: tuple[str, ...]
    ks: tuple[int, ...]
    costs: tuple[str, ...] = ("roofline:p100",)
    rules: str = "ocggs157"
    cutoff_s: float = 3600.0
    repeats: int = 1
    algos: tuple[str, ...] | None = None
    params: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: OCGGS_PARAMS, hash=False)
    reference: str = ""

    def runs(self, *, algos: Sequence[str] | None = None, models: Sequence[str] | None = None,
             costs: Sequence[str] | None = None, ks: Sequence[int] | None = None, cutoff_s: float | None = None,
             repeats: int | None = None, rules: str | None = None, expansions: int | None = None,
             memory_mb: float | None = None, seed: int = 0,
             params: Mapping[str, Mapping[str, Any]] | None = None) -> list[Run]:
        """The grid's runs with any field overridden; ``params`` (per algorithm) update the
        preset's.  Order: repeat, K, cost model, model, algorithm (a partial grid holds whole
        first repeats)."""
        chosen = list(algos) if algos else list(self.algos or registered_algorithms())
        merged = {a: dict(self.params.get(a, {})) for a in chosen}
        for a, p in (params or {}).items():
            merged.setdefault(a, {}).update(p)
        out = []
        for rep in range(self.repeats if repeats is None else repeats):
            for k in ks or self.ks:
                for cost in costs or self.costs:
                    for model in models or self.models:
                        for a in chosen:
                            out.append(Run(a, model, cost=cost, rules=rules or self.rules, k=k,
                                           cutoff_s=self.cutoff_s if cutoff_s is None else cutoff_s,
                                           expansions=expansions, memory_mb=memory_mb, repeat=rep, seed=seed + rep,
                                           params=merged.get(a, {})))
        return out


#: Table 2 of OCGGS, in Table 3's row order; sizes spelled out so a change of zoo defaults cannot
#: silently change the grid.
TABLE3_MODELS = ("inception_v3", "resnet:blocks=8", "resnext50", "nasnet_a", "bert:variant=faithful",
                 "sru:length=1", "nasrnn:length=5")

#: Tensat (MLSys'21) Table 2 models, as zoo specs.
TENSAT_MODELS = ("bert:variant=faithful", "resnext50", "nasnet_a", "nasrnn:length=5", "inception_v3", "squeezenet",
                 "vgg19")

PRESETS: Mapping[str, Preset] = MappingProxyType({p.name: p for p in (
    Preset("table3", "OCGGS Table 3: 7 DNNs, K=10, optimized cost / search time / memory",
           TABLE3_MODELS, (10,), costs=("roofline:p100", "measured"),
           reference="OCGGS §6.2.1, Tables 2 and 3 (7 DNNs, 157 rules, K=10, 1-hour kill)"),
    Preset("fig4", "OCGGS Fig. 4: ResNet 2/4/6/8 blocks and InceptionE 1/2/3/4 blocks at K=10",
           tuple(f"resnet:blocks={b}" for b in (2, 4, 6, 8)) + tuple(f"inception_e:blocks={b}" for b in (1, 2, 3, 4)),
           (10,), reference="OCGGS §6.2.2, Fig. 4"),
    Preset("fig5", "OCGGS Fig. 5: 6 ResNet blocks and 3 InceptionE blocks, K in {5,10,15,20,25}",
           ("resnet:blocks=6", "inception_e:blocks=3"), (5, 10, 15, 20, 25), reference="OCGGS §6.3, Fig. 5"),
    Preset("small-exact", "ResNet 2/4 blocks and SRU at small K: ENU's optimum and who reaches it",
           ("resnet:blocks=2", "resnet:blocks=4", "sru:length=1"), (4, 6), cutoff_s=600.0,
           reference="issue 5 'must show' (exact reference on small graphs)"),
    Preset("tensat", "Tensat's models: equality saturation vs Sampling vs TASO (same rules and cost)",
           TENSAT_MODELS, (10,), cutoff_s=60.0, algos=("eqsat", "sampling", "taso"),
           reference="Tensat (Yang et al., MLSys 2021), Table 2 models; issue 11"),
)})


def get_preset(name: str) -> Preset:
    """A preset by name (``KeyError`` listing the known ones)."""
    try:
        return PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown preset {name!r}; known: {', '.join(PRESETS)}") from None


__all__ = ["OCGGS_PARAMS", "PRESETS", "TABLE3_MODELS", "TENSAT_MODELS", "Preset", "get_preset", "registered_algorithms"]
