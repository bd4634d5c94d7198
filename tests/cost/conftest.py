"""Keep every cost test away from the user's real cache directory (``private_cache``, autouse); a small encoder block
(``encoder_like``); defined in tests/helpers.py, shared with tests/cli/test_cli_cost.py."""

from __future__ import annotations

from helpers import encoder_like_fixture, private_cache  # noqa: F401  (fixtures)
