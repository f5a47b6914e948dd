"""The rule registry: every rule documents its code, whether its changes are safe, and the codes it reports."""

from __future__ import annotations

import pytest

from air_migrate.rules import REGISTRY
from air_migrate.rule_base import LineRule, Rule


@pytest.mark.parametrize("code", sorted(REGISTRY))
def test_every_rule_says_what_it_does_and_how_safe_its_changes_are(code: str) -> None:
    rule = REGISTRY[code]
    assert rule.CODE == code and rule.DESCRIPTION.strip()
    module_doc = __import__(rule.__module__, fromlist=["_"]).__doc__ or ""
    assert module_doc.startswith(f"{code}: ")
    changes = issubclass(rule, Rule) or code == "AM110"
    assert ("Safety: " in module_doc) is changes  # rules that only report have nothing to call safe


def test_the_registry_holds_both_kinds_of_rule() -> None:
    assert sorted(REGISTRY) == ["AM101", "AM102", "AM103", "AM108", "AM110", "AM111", "AM201", "AM217"]
    assert {code for code, rule in REGISTRY.items() if issubclass(rule, LineRule)} == {"AM110", "AM111"}
