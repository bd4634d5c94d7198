"""Operator family: linalg (see graphsub.ops.registry)."""

from __future__ import annotations
