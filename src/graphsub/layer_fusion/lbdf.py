"""Line-Buffer Depth-First (LBDF) cost model: ``F_beta`` and ``F_D`` of a fusion group.

The paper gives no equations for ``F_beta`` or ``F_D``; this model is graphsub's own, after the paper's
Fig. 1 and DeFiNES's depth-first line buffering.  With ``b`` bytes per element, for a group ``phi``::

    F_beta = b * [ sum_v Wt(v)                                   # all weights stay on chip
                 + sum_t C_t * W_t * min(H_t, max_c r_c)         # line buffers (rows kept)
                 + sum_joins SK(j)                               # skip / reconvergence delay
                 + sum_{global v} |out(v)|                       # accumulators (GAP, Gemm)
                 + sum_{t in Out} C_t * W_t ]                    # one output row staged
    F_D    = b * [ sum_v Wt(v) (if weights_in_dram) + sum_{t in In} |t| + sum_{t in Out} |t| ]

* Line buffers cover every tensor with a consumer in ``phi`` (``In``, internal tensors, and
  -- a deviation from the reference's ``In u Int`` -- ``Out`` tensors that also feed an op of
  the group, which physically need their rows too).
* ``SK(j)`` for a join ``j`` (add/mul/concat of >= 2 activations): ``f`` = ``j``'s immediate
  dominator in the group (external producers hang off a virtual root; if the root dominates,
  the inputs are independent DRAM streams and ``SK = 0``).  For each input ``u``,
  ``lambda(u)`` = max over paths ``f -> u`` of the look-aheads converted to rows of ``f``
  (``sum a_c * S(c)``, ``S`` = product of strides before ``c``), ``H_f`` when the path has a
  global op; ``SK(j) = sum_u C_u W_u ceil((max lambda - lambda(u)) / S(u))`` rows, capped at
  ``H_u``.  ``skip_reread``: when ``f`` is outside the group, re-read it from DRAM instead.
* An op is unfusable when its own group does not fit (in practice: its weights exceed the
  buffer).

Worked example (ResNet basic block at 1 B/elem, see ``tests/layer_fusion/test_cost_models.py``):
``x`` is 64x56x56, two 3x3 convs (pad 1) then ``add(conv2, x)``: ``lambda(conv2) = 1 + 1 = 2``
rows, ``lambda(x) = 0``, so ``SK = 64 * 56 * 2 = 7168`` bytes.

>>> from graphsub import zoo
>>> from graphsub.layer_fusion.graph import fusion_graph
>>> fg = fusion_graph(zoo.get("resnet18"))
>>> m = LBDFCost(fg, 256 * 1024)
>>> len(m.unfusable), sorted({fg.ops[v] for v in m.unfusable})  # 3x3 convs with >= 256 in/out, fc
(9, ['conv2d', 'gemm'])
"""

from __future__ import annotations

from graphsub.layer_fusion.cost import FusionCostModel, GroupCost, rows_cap
from graphsub.layer_fusion.plan import Group

ROOT = -1


class LBDFCost(FusionCostModel):
    """LBDF ``F_beta`` / ``F_D`` (module docstring); memoized per group."""

    scheme = "lbdf"

    def _group(self, group: Group) -> GroupCost:
        fg = self.fg
        cfg = self.config
        members = set(group)
        ins, outs = self.boundary(group)
        weights = sum(fg.weight[v] for v in group)
        line = 0
        for t in (*ins, *group):
            cons = [c for c in fg.consumers[t] if c in members]
            if not cons:
                continue
            c, h, w = fg.shape[t]
            line += c * w * min(h, max(fg.geom[k].rows for k in cons))
        accum = sum(fg.geom[v].accum for v in group if fg.geom[v].is_global)
        out_rows = sum(fg.shape[t][0] * fg.shape[t][2] for t in outs)
        skip, reread = self._skip(group, members)
        fbeta = weights + line + skip + accum + out_rows
        fd = (weights if cfg.weights_in_dram else 0) + sum(fg.size(t) for t in ins)
        fd += sum(fg.size(t) for t in outs) + reread
        b = cfg.bytes_per_elem
        return GroupCost(float(b * fbeta), float(b * fd))

    def dominators(self, group: Group, members: set[int]) -> dict[int, int]:
        """Immediate dominator of every op of ``group`` and of every external producer it
        reads (those have ``ROOT``), in the group's DAG (ops are in topological order, so the
        idom of ``v`` is the lowest common dominator-tree ancestor of its predecessors)."""
        fg = self.fg
        idom: dict[int, int] = {}
        depth: dict[int, int] = {ROOT: 0}

        def lca(a: int, b: int) -> int:
            while a != b:
                if depth[a] >= depth[b]:
                    a = idom[a]
                else:
                    b = idom[b]
            return a

        for v in group:
            d: int | None = None
            for p in fg.preds[v]:
                if p not in members and p not in idom:
                    idom[p] = ROOT
                    depth[p] = 1
                d = p if d is None else lca(d, p)
            assert d is not None
            idom[v] = d
            depth[v] = depth[d] + 1
        return idom

    def _skip(self, group: Group, members: set[int]) -> tuple[int, int]:
        """``(sum of SK(j) over the joins, DRAM elements re-read instead)``."""
        fg = self.fg
        joins = [v for v in group if fg.geom[v].kind == "join"]
        if not joins:
            return 0, 0
        idom = self.dominators(group, members)
        total = 0
        reread: set[int] = set()
        for j in joins:
            f = idom[j]
            if f == ROOT:
                continue
            if f not in members and self.config.skip_reread:
                reread.add(f)
                continue
            h_f = fg.shape[f][1]
            lam: dict[int, float] = {f: 0.0}
            stride: dict[int, float] = {f: 1.0}
            glob: dict[int, bool] = {f: False}
            for v in group:
                if v >= j:
                    break
                if v == f:
                    continue
                reach = [p for p in fg.preds[v] if p in lam]
                if not reach:
                    continue
                g = fg.geom[v]
                best = max(reach, key=lambda p: lam[p] + g.lookahead * stride[p])
                lam[v] = lam[best] + g.lookahead * stride[best]
                stride[v] = stride[best] * float(g.stride)
                glob[v] = g.is_global or any(glob[p] for p in reach)
            lams = {u: (float(h_f) if glob[u] else min(lam[u], float(h_f))) for u in fg.preds[j]}
            top = max(lams.values())
            for u, lu in lams.items():
                c, h, w = fg.shape[u]
                total += c * w * rows_cap((top - lu) / stride[u], h)
        return total, sum(fg.size(t) for t in reread)


__all__ = ["LBDFCost"]
