"""Operator family: shape (see graphsub.ops.registry)."""

from __future__ import annotations
