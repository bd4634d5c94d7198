"""What an :func:`graphsub.optimize.optimize` call optimizes for: the model's inference in ONNX Runtime (no target,
the default) or a :class:`Target` -- one pipeline, several targets.

A target is handed to ``optimize(model, target=...)`` with the graph to optimize as ``model``; the pipeline's parts
stay the same (plan the budget from the registered sources' estimates, search, collect candidates, verify each
against the original, decide by :mod:`graphsub.optimize.decide`) and ask the target four things:

* :meth:`Target.accepts`: which candidate sources it can use. A target that runs graphs outside ONNX Runtime (a
  PyTorch module) takes only the sources whose candidates are graphs of graphsub's rules
  (:attr:`graphsub.optimize.sources.Source.graphs`), not a peer's ONNX file or ONNX Runtime's contrib ops;
* :meth:`Target.check`: a check of each verified candidate beyond its equivalence to the original in ONNX Runtime
  (for a module: its emitted module's loss and gradients against the module's own ``loss.backward()``);
* :meth:`Target.makers`: how a candidate is timed against the original, when the target times candidates its own
  way (:attr:`Target.own_timing`; otherwise ONNX Runtime sessions, as for inference): the pipeline then decides each
  candidate in session groups of those units with an A/A control (:func:`graphsub.optimize.race.confirm_each`, with
  the target's :attr:`Target.groups`, :attr:`Target.rounds`, :attr:`Target.budget_ms` and :attr:`Target.alpha`);
* :attr:`Target.where`: how the decision names what was timed.

The targets: :class:`graphsub.optimize.sources.training.TrainingTarget` (an ONNX training graph, timed in ONNX Runtime
on a real step's inputs, with its own sources ``backward-rules`` and ``forward-first``) and
:class:`graphsub.optimize.torch_training.ModuleTarget` (a PyTorch module trained in PyTorch).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from graphsub.optimize import decide

if TYPE_CHECKING:
    from graphsub.optimize.candidates import Candidate
    from graphsub.optimize.decide import Maker
    from graphsub.optimize.sources.base import Source


class Target:
    """The base of the targets (see the module docstring): every source, no further check, ONNX Runtime sessions."""

    #: the inputs the candidates are timed on in ONNX Runtime (None: the first verification draw's)
    feeds: Mapping[str, Any] | None = None
    #: whether :meth:`makers` times the candidates (else ONNX Runtime sessions of their files), and the measurement
    #: each candidate's decision then gets (:func:`graphsub.optimize.decide.measure`)
    own_timing: bool = False
    groups: int = decide.GROUPS
    rounds: int = decide.ROUNDS_PER_GROUP
    budget_ms: float = 200.0
    alpha: float = decide.ALPHA
    #: whether the searches start from the graph cleaned (:mod:`graphsub.rules.cleanup`): folding weights into
    #: constants and merging equal ones is right where weights are constants (inference), not where they are trained
    cleanup: bool = True

    def accepts(self, source: Source) -> bool:
        """Whether the candidate source ``source`` makes candidates this target can use."""
        return True

    def check(self, candidate: Candidate) -> str | None:
        """A check of ``candidate`` (already verified against the original) beyond equivalence in ONNX Runtime: None
        when it passes, else why not (the candidate is then dropped, never timed)."""
        return None

    def makers(self, candidate: Candidate) -> tuple[Maker, Maker]:
        """Makers of fresh units of the original and of ``candidate`` for :func:`graphsub.optimize.decide.measure`
        (only with :attr:`own_timing`)."""
        raise NotImplementedError(f"{type(self).__name__} times candidates in ONNX Runtime (own_timing is False)")

    def where(self, threads: int) -> str:
        """How the decision line names what was timed."""
        return f"under ORT_ENABLE_ALL at {threads} thread(s)"


__all__ = ["Target"]
