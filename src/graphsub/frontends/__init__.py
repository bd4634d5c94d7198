"""Frontends: the only modules that import onnx (and, later, torch)."""
