"""Fixtures for `graphsub optimize`: a small ONNX model with an op graphsub does not model (``model_path``), fake
timing (``fake_timing``), a wrong rule (``bad_rule``); defined in tests/helpers.py, shared with
tests/cli/test_cli_optimize.py."""

from __future__ import annotations

from helpers import bad_rule_fixture, fake_timing_fixture, model_path_fixture  # noqa: F401  (fixtures)
