"""Operator family: conv (see graphsub.ops.registry)."""

from __future__ import annotations
