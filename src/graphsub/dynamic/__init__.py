"""Dynamic-graph reuse (after Liu 2019): define-by-run PyTorch code traced lazily into a DAG,
frequent subgraphs found by depth-limited signatures, compiled once and reused, and
signature-keyed batching of independent occurrences.

* :mod:`graphsub.dynamic.lazy` -- ``with lazy(engine): ...`` records a DAG (TorchFunctionMode +
  ``__torch_function__`` of the :class:`LazyTensor` stand-in), ``build(out)`` / ``out.backward()`` evaluate it;
* :mod:`graphsub.dynamic.record` -- recording one call: the stand-in, shape inference, dropout masks, word ids as
  lazy data nodes;
* :mod:`graphsub.dynamic.signature` -- ``H'(n, d)`` signatures, ``shared()``, §5.5, the
  collision-checked pattern table;
* :mod:`graphsub.dynamic.codegen` -- one generated function per pattern, python / fx / inductor;
* :mod:`graphsub.dynamic.dag` -- what is recorded: nodes' data, the trace, its batch groups, where a
  value is, node-by-node evaluation;
* :mod:`graphsub.dynamic.calls` -- call templates and op keys (the tracer's memo);
* :mod:`graphsub.dynamic.engine` -- :class:`Reuse`: collection, replacement, execution, batching;
* :mod:`graphsub.dynamic.plan` -- a trace's batches as data (steps, gather programs, deferred dropout
  masks), run with autograd;
* :mod:`graphsub.dynamic.prefetch` -- :func:`prefetch`: worker processes record and plan the next batches
  while the main process runs the current one;
* :mod:`graphsub.dynamic.capture` -- module-level capture: an ``nn.Module`` (or ``@cell``) call recorded as one
  node and batched whole, op-level recording as the explained fallback;
* :mod:`graphsub.dynamic.schedule` -- steps regrouped per op key, as late as possible where that merges them;
* :mod:`graphsub.dynamic.plancache` -- plans cached by the exact structure of their DAG;
* :mod:`graphsub.bench.dynamic` -- the end-to-end comparison of the modes (``graphsub dynamic bench``);
* :mod:`graphsub.dynamic.workloads` -- what all this is measured on: SST trees, the synthetic treebank,
  the binary Tree-LSTM, a sequence LSTM and a Tree-GRU written as plain eager PyTorch with their cells as
  ``nn.Module``s (they import nothing of the machinery above).
"""

from graphsub.dynamic.capture import cell
from graphsub.dynamic.engine import Reuse
from graphsub.dynamic.lazy import LazyError, LazyTensor, build, lazy
from graphsub.dynamic.prefetch import PrefetchError, prefetch

__all__ = ["LazyError", "LazyTensor", "PrefetchError", "Reuse", "build", "cell", "lazy", "prefetch"]
