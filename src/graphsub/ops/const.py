"""Operator family: const (see graphsub.ops.registry)."""

from __future__ import annotations
