"""Fingerprints: graphs evaluated on random residues modulo :data:`~.templates.P`.

Two graphs compute the same function with overwhelming probability when their outputs agree on
random inputs (Schwartz-Zippel: every template is a polynomial over the field of residues, ReLU
included once it is replaced by ``x*(x+1)+1``; max pooling is a fixed function of its window).
A graph's fingerprint is a 64-bit digest of the *multiset* of its unused outputs -- shapes and
values -- so graphs whose outputs agree up to order share a fingerprint and the output mapping is
recovered by matching per-output digests.

Digests are blake2b-based, never Python's per-process randomized ``hash``, so that shards
computed in different processes agree.

>>> a = np.arange(6, dtype=np.int64).reshape(2, 3)
>>> tensor_digest(a) == tensor_digest(a.copy()), tensor_digest(a) == tensor_digest(a.T.copy())
(True, False)
>>> graph_digest([3, 1]) == graph_digest([1, 3])
True
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable, Sequence

import numpy as np

from graphsub.rules.generate.templates import P, Var


def tensor_digest(a: np.ndarray) -> int:
    """64-bit digest of an int64 tensor's shape and values."""
    h = hashlib.blake2b(digest_size=8)
    h.update(struct.pack(f"<{a.ndim + 1}q", a.ndim, *a.shape))
    h.update(np.ascontiguousarray(a, dtype=np.int64).tobytes())
    return int.from_bytes(h.digest(), "little")


def graph_digest(output_digests: Iterable[int]) -> int:
    """64-bit digest of a multiset of output digests (order-independent)."""
    vals = sorted(output_digests)
    h = hashlib.blake2b(digest_size=8)
    h.update(struct.pack(f"<{len(vals)}Q", *vals))
    return int.from_bytes(h.digest(), "little")


def random_inputs(variables: Sequence[Var], seed: int) -> list[np.ndarray]:
    """Uniform random residues for each variable (deterministic in ``seed``)."""
    rng = np.random.default_rng(seed)
    return [rng.integers(0, P, size=v.shape, dtype=np.int64) for v in variables]


__all__ = ["graph_digest", "random_inputs", "tensor_digest"]
