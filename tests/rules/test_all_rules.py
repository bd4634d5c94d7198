"""Every rule of every set: exact rules pass numeric verification; inexact ones say why (and
really are inexact)."""

from __future__ import annotations

import pytest

from graphsub.rules.library import get_set, set_names
from graphsub.rules.rule import Rule
from graphsub.rules.soundness.numeric import verify_rule

ALL: dict[str, Rule] = {}
for _s in set_names():
    for _r in get_set(_s):
        ALL.setdefault(_r.name, _r)


def test_set_sizes() -> None:
    sizes = {s: len(get_set(s)) for s in set_names()}
    assert sizes["taso-pb"] == 133 and sizes["taso151"] == 151 and sizes["ocggs157"] == 157
    assert sizes["ocggs157-faithful"] == 157
    assert all(n > 0 for n in sizes.values())
    assert all(r.exact for r in get_set("default"))


@pytest.mark.parametrize("name", sorted(ALL))
def test_rule(name: str) -> None:
    rule = ALL[name]
    report = verify_rule(rule)
    if rule.exact:
        assert report.passed, report.reason
    else:
        assert rule.reason
        assert not report.passed, "a rule marked inexact verifies: mark it exact or fix the examples"
