"""Shared machinery of the fusion cost models: configuration, per-group memo, plan evaluation.

A cost model prices one fusion group ``phi`` (a sorted tuple of op ids) with

* ``F_beta(phi)``: the on-chip buffer bytes the group needs (``math.inf``: cannot run at all);
* ``F_D(phi)``: the DRAM bytes it moves (reads of inputs and weights, writes of outputs).

A group is *valid* iff ``F_beta(phi) < buffer``.  A plan's DRAM is the sum of ``F_D`` over the
groups of fusable ops; its MBU (maximum buffer usage) the largest ``F_beta`` among them.  Ops
whose singleton group is already invalid are *unfusable* (:attr:`FusionCostModel.unfusable`);
as in the paper they stay singletons and are left out of DRAM and MBU.

Units: bytes.  ``KB`` = 1024 bytes, ``MB`` = 1024**2 bytes.  Results are memoized per group
(the paper's F_beta / F_D cache).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

from graphsub.layer_fusion.graph import FusionGraph
from graphsub.layer_fusion.plan import FusionPlan, Group

KB = 1024
MB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class CostConfig:
    """Options shared by the cost models.

    * ``bytes_per_elem``: 1 (int8, what the paper's numbers suggest), 2 or 4;
    * ``weights_in_dram``: count weight loads in ``F_D`` (False: weights are configuration,
      loaded once outside the inference, and only occupy buffer);
    * ``skip_reread`` (LBDF): re-read a skip tensor that comes from outside the group from DRAM
      instead of buffering it (Shi et al.);
    * ``pe_channels`` (BRR): channels a "partial" layer keeps (PE-array channel parallelism);
    * ``entry_rule`` (BRR): Optimus' structural rule that a group may not start with a pool,
      element-wise, concat or depthwise op.
    """

    bytes_per_elem: int = 1
    weights_in_dram: bool = True
    skip_reread: bool = False
    pe_channels: int = 16
    entry_rule: bool = False


@dataclass(frozen=True, slots=True)
class GroupCost:
    fbeta: float
    fd: float


@dataclass(frozen=True, slots=True)
class PlanCost:
    """Cost of a plan: DRAM bytes and MBU over fusable groups, validity, invalid groups."""

    dram: float
    mbu: float
    valid: bool
    num_groups: int
    invalid_groups: tuple[Group, ...] = ()

    @property
    def dram_mb(self) -> float:
        return self.dram / MB

    @property
    def mbu_kb(self) -> float:
        return self.mbu / KB


class FusionCostModel(ABC):
    """Base class: subclasses implement :meth:`_group` (``F_beta``, ``F_D`` of one group)."""

    scheme = "abstract"

    def __init__(self, fg: FusionGraph, buffer_bytes: int, config: CostConfig | None = None):
        if buffer_bytes <= 0:
            raise ValueError(f"buffer size must be positive, got {buffer_bytes}")
        self.fg = fg
        self.buffer = buffer_bytes
        self.config = config or CostConfig()
        self._memo: dict[Group, GroupCost] = {}
        self.group_evals = 0
        self.unfusable: frozenset[int] = frozenset(
            v for v in range(fg.num_ops) if not self.valid((v,))
        )

    @abstractmethod
    def _group(self, group: Group) -> GroupCost:
        """Uncached ``(F_beta, F_D)`` of ``group`` in bytes."""

    def group_cost(self, group: Group) -> GroupCost:
        hit = self._memo.get(group)
        if hit is None:
            hit = self._group(group)
            self._memo[group] = hit
            self.group_evals += 1
        return hit

    def fbeta(self, group: Group) -> float:
        return self.group_cost(group).fbeta

    def fd(self, group: Group) -> float:
        return self.group_cost(group).fd

    def valid(self, group: Group) -> bool:
        return self.group_cost(group).fbeta < self.buffer

    def is_fusable_group(self, group: Group) -> bool:
        """False for the singleton group of an unfusable op (excluded from the metrics)."""
        return not (len(group) == 1 and group[0] in self.unfusable)

    def evaluate(self, plan: FusionPlan) -> PlanCost:
        """DRAM, MBU and validity of ``plan`` over its fusable groups."""
        dram = 0.0
        mbu = 0.0
        invalid: list[Group] = []
        for g in plan.groups:
            if not self.is_fusable_group(g):
                continue
            c = self.group_cost(g)
            dram += c.fd
            if c.fbeta >= self.buffer:
                invalid.append(g)
            elif c.fbeta > mbu:
                mbu = c.fbeta
        return PlanCost(dram, mbu, not invalid, len(plan), tuple(invalid))

    # ------------------------------------------------------------------ helpers for subclasses
    def boundary(self, group: Group) -> tuple[list[int], list[int]]:
        """``(In, Out)`` tensor ids of ``group``: tensors read but produced elsewhere, and
        tensors produced here that are read elsewhere or are graph outputs."""
        fg = self.fg
        members = set(group)
        ins: list[int] = []
        outs: list[int] = []
        seen: set[int] = set()
        for v in group:
            for t in fg.preds[v]:
                if t not in members and t not in seen:
                    seen.add(t)
                    ins.append(t)
            if fg.is_output[v] or any(c not in members for c in fg.consumers[v]):
                outs.append(v)
        return ins, outs

    def describe(self) -> str:
        return (f"{self.scheme} buffer {self.buffer / KB:g} KB, {self.config.bytes_per_elem} B/elem, "
                f"weights {'in' if self.config.weights_in_dram else 'not in'} DRAM")


def rows_cap(rows: float, height: int) -> int:
    """Rows actually buffered: ``ceil(rows)`` clamped to ``[0, height]``."""
    return max(0, min(height, math.ceil(rows)))


__all__ = ["KB", "MB", "CostConfig", "FusionCostModel", "GroupCost", "PlanCost", "rows_cap"]
