"""The dynamic-graph workloads: the data and models that the tracing, reuse and batching machinery of
:mod:`graphsub.dynamic` is measured on (the thesis' Tree-LSTM on SST, and a sequence LSTM).

* :mod:`graphsub.dynamic.workloads.sst` -- Stanford Sentiment Treebank trees (PTB parsing, loading from the
  shared data folder, vocabulary, encoding, batching) and a synthetic treebank calibrated to SST;
* :mod:`graphsub.dynamic.workloads.models` -- the binary Tree-LSTM and the sequence LSTM, written as plain
  eager define-by-run PyTorch, their batch losses and optimizer.

Nothing here knows about lazy tracing: the models run eagerly as they are, and the machinery records them
from the outside (``with lazy(engine): loss = batch_loss(model, trees)``).  Imports go one way: the
machinery (:mod:`graphsub.bench.dynamic`) imports the workloads, never the reverse.
"""
