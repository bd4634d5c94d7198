"""Operator family: norm (see graphsub.ops.registry)."""

from __future__ import annotations
