"""Automatic generation of substitution rules (TASO, Jia et al. SOSP 2019, Algorithm 1).

Modules, in pipeline order:

* :mod:`.templates` -- operator templates and input tensors (TASO's set by default);
* :mod:`.enumerate` -- depth-first enumeration of graphs of up to ``max_ops`` operators,
  skipping duplicated computation, each fingerprinted on random residues;
* :mod:`.fingerprint` -- modular evaluation digests;
* :mod:`.parallel` -- sharding over processes (or Ray), checkpoints and resume;
* :mod:`.prune` -- candidate pairs, confirmation on more inputs, input-renaming and
  common-subgraph pruning with per-stage counts;
* :mod:`.emit` -- the rules.json format and its conversion into graphsub rules;
* :mod:`.pipeline` -- :func:`generate`, the whole run.
"""

from graphsub.rules.generate.enumerate import EnumConfig
from graphsub.rules.generate.pipeline import Generated, generate

__all__ = ["EnumConfig", "Generated", "generate"]
