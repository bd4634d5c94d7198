"""Row layout of a batched plan: each group's rows ordered so that what a consumer reads of it is one chunk.

Split from :mod:`graphsub.dynamic.plan` (which calls :func:`layout_rows` when it builds a plan with ``layout``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from graphsub.dynamic.calls import DATA_KIDS
from graphsub.dynamic.dag import Group
from graphsub.dynamic.lazy import LazyTensor

if TYPE_CHECKING:
    from graphsub.dynamic.plan import OpDef


def layout_rows(groups: Sequence[Group], ops: dict[int, OpDef]) -> list[list[int] | None]:
    """Choose each group's row order so that what a batched consumer reads of it is one contiguous run in the
    consumer's member order (a *chunk*), and return each group's chunk sizes (``None``: no reordering).

    At run time a step's value is split into its chunks once (``torch.split``), and a consumer that reads a
    whole chunk takes it as it is: no ``index_select`` forward, and backward one concatenation per step instead
    of a zero-filled gradient of the whole step per consumer (which is what a gather costs: a step read by
    every later level -- the leaves of a tree -- would otherwise be zero-filled once per level and column).

    Groups are visited from the last: a group's order is fixed by its consumers (all later), then it claims
    its inputs' rows for itself (the first column to read a row owns it).  Rows read by nobody here keep
    their order, after the chunks."""
    chunks: list[list[int] | None] = [None] * len(groups)
    for g in groups:
        for m in g.members:
            m.own = None
    for t in range(len(groups) - 1, -1, -1):
        g = groups[t]
        ms = g.members
        keys = [m.own for m in ms]  # (consumer step, column, member position) of the first reader, if any
        nones = keys.count(None)
        if nones != len(keys):
            if nones:  # rows nobody here reads: after the chunks, in their order
                last = len(groups) << _STEP
                keys = [k if k is not None else last + i for i, k in enumerate(keys)]
            if keys != sorted(keys):  # the keys are distinct: sorted means strictly increasing
                order = sorted(range(len(ms)), key=keys.__getitem__)
                ms = g.members = [ms[i] for i in order]
                keys = [keys[i] for i in order]
                for r, m in enumerate(ms):
                    m.row = r
            sizes: list[int] = []
            prev = -1
            for k in keys:
                ck = k >> _COL
                if ck == prev:
                    sizes[-1] += 1
                else:
                    sizes.append(1)
                    prev = ck
            if len(sizes) > 1:
                chunks[t] = sizes
        if not ops[g.kid].batchable:
            continue
        first = ms[0].inputs
        for j, x in enumerate(first):
            if type(x) is not LazyTensor or x.kid in DATA_KIDS:  # data: stacked, not gathered (see column)
                continue
            if j and x.part > 0 and type(first[j - 1]) is LazyTensor and first[j - 1].part >= 0 \
                    and first[j - 1].inputs[0] is x.inputs[0]:
                continue  # another output of the nodes column j - 1 reads (a cell's state): claimed by it
            base = (t << _STEP) + (j << _COL)
            for p, m in enumerate(ms):
                y = m.inputs[j]
                c = y if y.part < 0 else y.inputs[0]
                cg = c.grp
                if c.own is None and cg is not None and cg.pos >= 0:
                    c.own = base + p
    return chunks


_COL = 24
_STEP = 48
"""A row's owner in :func:`layout_rows` is one int, ``step << _STEP | column << _COL | position`` (ordered as the
tuple, cheaper to compare and sort); its chunk is ``owner >> _COL``."""


def run_index(sizes: list[int]) -> dict[tuple[int, int], int]:
    """``(start, stop)`` of each chunk -> its index."""
    out = {}
    start = 0
    for k, n in enumerate(sizes):
        out[(start, start + n)] = k
        start += n
    return out


__all__ = ["layout_rows", "run_index"]
