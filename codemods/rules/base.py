"""What every rule shares: findings, reporting through one channel, and the registry."""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Dict, List, Type, TypeVar

import libcst
from libcst.metadata import PositionProvider


@dataclasses.dataclass(frozen=True)
class Finding:
    """A change made, or something a person must look at, at a 1-based line and column of a cell."""

    code: str
    line: int
    column: int
    message: str
    attention: bool = False
    """True when nothing was rewritten and a person must decide."""
    blocking: bool = False
    """True when the file cannot be migrated correctly without a person: by default it is then left unchanged."""


class Rule(libcst.CSTTransformer):
    """Base of every rule: ``CODE`` (e.g. ``AM101``) and a one-line ``DESCRIPTION`` for ``--list-rules``."""

    CODE: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self) -> None:
        super().__init__()
        self.findings: List[Finding] = []

    def report(
        self, node: libcst.CSTNode, message: str, attention: bool = False, code: str = "", blocking: bool = False
    ) -> None:
        """Record a finding at ``node`` (an original node); ``code`` defaults to the rule's own."""
        start = self.get_metadata(PositionProvider, node).start
        self.findings.append(
            Finding(code or self.CODE, start.line, start.column + 1, message, attention or blocking, blocking)
        )


REGISTRY: Dict[str, Type[Rule]] = {}
R = TypeVar("R", bound=Type[Rule])


def register(rule: R) -> R:
    """Class decorator: make a rule known by its code."""
    if rule.CODE in REGISTRY:
        raise ValueError(f"rule code {rule.CODE} is registered twice")
    REGISTRY[rule.CODE] = rule
    return rule


def apply(rule_type: Type[Rule], module: libcst.Module) -> "tuple[libcst.Module, List[Finding]]":
    """Run one rule over a parsed cell; return the new module and what the rule reported."""
    wrapper = libcst.MetadataWrapper(module, unsafe_skip_copy=True)
    rule = rule_type()
    new_module = wrapper.visit(rule)
    return new_module, rule.findings

