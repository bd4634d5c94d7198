"""Reproducible experiment drivers (used by ``graphsub bench`` and ``benchmarks/``)."""
