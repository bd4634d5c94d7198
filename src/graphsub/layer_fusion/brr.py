"""Buffer-Requirement-Reduction (BRR) cost model, after the public Optimus code
(``SheaCai/optimus``, ``fusion/scheduling/interlayer.py``).

Execution is in full-width row stripes of the group output.  For a group ``phi``:

* ``sigma(v)``: rows of ``v``'s output per row of the group output (1 at the sinks, then
  ``max_c sigma(c) * s_c`` over in-group consumers ``c``);
* ``m(v)``: rows of ``v``'s output needed for one output row: ``m(sink) = sigma(sink)``,
  otherwise ``min(H_v, max_c (m(c) - 1) * s_c + K_c)``;
* "alternate pair": conv-like layers (conv, depthwise, dense) alternate between *full* (whole
  channel depth buffered) and *partial* (``k = min(pe_channels, C)`` channels); entries are
  full in phase A and partial in phase B; other ops inherit ``OR`` of their in-group inputs;
* footprint (elements)::

      M0 = sum_{entry v, not full} sum_{src} C_src * min((m(v)-1) s_v + K_v, H_src) * W_src
         + sum_{entry non-conv v, full} C_v m(v) W_v
         + sum_{conv v} (C_v if full else k_v) m(v) W_v
      D  = the same sums with m replaced by sigma (input term: sigma(v) * s_v rows)

  Optimus keeps the phase with the smaller ``D / (beta/b - M0)`` among those that fit.
* ``F_beta = b * M0`` (weights need not fit: they stream).  Tiles: ``n = 1`` if
  ``b (W + M0) <= beta``, else ``h = floor((beta/b - M0) / D) + 1`` output rows per tile and
  ``n = ceil(H_out / h)``; ``F_D = b * (W * n + In + Out)`` (``W * n`` only when
  ``weights_in_dram``).
* Structural rules: a group of 2+ ops holding a global reduction whose result is broadcast
  back onto a feature map (Squeeze-Excite) is unsupported (``F_beta = inf``), as in the paper;
  ``entry_rule`` adds Optimus' "no pool / element-wise / concat / depthwise entry" rule.

>>> from graphsub import zoo
>>> from graphsub.layer_fusion.graph import fusion_graph
>>> fg = fusion_graph(zoo.get("mobilenet_v3_small"))
>>> m = BRRCost(fg, 256 * 1024)
>>> se = (3, 4, 5, 6, 7, 8, 9)                     # the first SE block, from its input to the mul
>>> [fg.ops[v] for v in se][::3], m.fbeta(se), m.fbeta(se[:-1]) < m.buffer
(['relu', 'relu', 'mul'], inf, True)
"""

from __future__ import annotations

import math

from graphsub.layer_fusion.cost import FusionCostModel, GroupCost
from graphsub.layer_fusion.plan import Group

CONV_KINDS = frozenset({"conv", "dwconv", "dense"})


class BRRCost(FusionCostModel):
    """Optimus-style BRR ``F_beta`` / ``F_D`` (module docstring); memoized per group."""

    scheme = "brr"

    def _structural_ok(self, group: Group, members: set[int]) -> bool:
        fg = self.fg
        if len(group) == 1:
            return True
        for v in group:
            g = fg.geom[v]
            entry = not any(p in members for p in fg.preds[v])
            if self.config.entry_rule and entry and g.kind in ("pool", "eltwise", "join", "dwconv", "global"):
                return False
            if g.kind == "join":
                hs = {fg.shape[p][1:] for p in fg.preds[v]}
                if len(hs) > 1:  # broadcast of a reduced map (SE)
                    return False
        return True

    def _group(self, group: Group) -> GroupCost:
        fg = self.fg
        cfg = self.config
        b = cfg.bytes_per_elem
        members = set(group)
        ins, outs = self.boundary(group)
        weights = sum(fg.weight[v] for v in group)
        io = sum(fg.size(t) for t in ins) + sum(fg.size(t) for t in outs)
        if not self._structural_ok(group, members):
            return GroupCost(math.inf, float(b * ((weights if cfg.weights_in_dram else 0) + io)))
        sigma: dict[int, float] = {}
        m: dict[int, float] = {}
        for v in reversed(group):
            cons = [c for c in fg.consumers[v] if c in members]
            h = fg.shape[v][1]
            if not cons:
                sigma[v] = 1.0
                m[v] = 1.0
                continue
            sigma[v] = max(sigma[c] * float(fg.geom[c].stride) for c in cons)
            m[v] = min(float(h), max((m[c] - 1) * float(fg.geom[c].stride) + fg.geom[c].kernel for c in cons))
        cap = self.buffer / b
        phases = [self._footprint(group, members, m, sigma, first_full) for first_full in (True, False)]
        fitting = [(d / (cap - m0), m0, d) for m0, d in phases if m0 < cap]
        if fitting:
            _, m0, delta = min(fitting)
        else:
            m0, delta = min(phases)
        if b * (weights + m0) <= self.buffer or m0 >= cap or delta <= 0:
            tiles = 1
        else:
            h_tile = math.floor((cap - m0) / delta) + 1
            h_out = max(fg.shape[v][1] for v in group if not any(c in members for c in fg.consumers[v]))
            tiles = math.ceil(h_out / h_tile)
        fd = (weights * tiles if cfg.weights_in_dram else 0) + io
        return GroupCost(float(b * m0), float(b * fd))

    def _footprint(self, group: Group, members: set[int], m: dict[int, float], sigma: dict[int, float],
                   first_full: bool) -> tuple[float, float]:
        """``(M0, D)`` in elements for one phase of the alternate-pair schedule."""
        fg = self.fg
        full: dict[int, bool] = {}
        m0 = 0.0
        delta = 0.0
        for v in group:
            g = fg.geom[v]
            inside = [p for p in fg.preds[v] if p in members]
            entry = not inside
            conv = g.kind in CONV_KINDS
            if entry:
                full[v] = first_full
            elif conv:
                full[v] = not any(full[p] for p in inside)
            else:
                full[v] = any(full[p] for p in inside)
            c, _, w = fg.shape[v]
            if entry and not full[v]:
                for t in fg.preds[v]:
                    ct, ht, wt = fg.shape[t]
                    m0 += ct * min((m[v] - 1) * float(g.stride) + g.kernel, ht) * wt
                    delta += ct * min(sigma[v] * float(g.stride), ht) * wt
            if entry and full[v] and not conv:
                m0 += c * m[v] * w
                delta += c * sigma[v] * w
            if conv:
                ch = c if full[v] else min(self.config.pe_channels, c)
                m0 += ch * m[v] * w
                delta += ch * sigma[v] * w
        return m0, delta


__all__ = ["BRRCost"]
