"""Operator family: pool (see graphsub.ops.registry)."""

from __future__ import annotations
