"""Substitution rules: patterns, matching, application, the rule library, TASO import, soundness checks.

>>> from graphsub.rules import find_matches, apply, get_set
"""

from __future__ import annotations

from graphsub.rules.apply import Substitution, TargetBuilder, apply, fold_weights
from graphsub.rules.library import find_rule, get_set, resolve_rules, set_names
from graphsub.rules.match import Match, MatchView, explain, find_matches, matches_near, rematch
from graphsub.rules.pattern import Pattern, PatternBuilder, one_of, same_pads, valid_pads
from graphsub.rules.rule import Example, Rule, Where, make_rule

__all__ = [
    "Example", "Match", "MatchView", "Pattern", "PatternBuilder", "Rule", "Substitution",
    "TargetBuilder", "Where", "apply", "explain", "find_matches", "find_rule", "fold_weights",
    "get_set", "make_rule", "matches_near", "one_of", "rematch", "resolve_rules", "same_pads", "set_names",
    "valid_pads",
]
