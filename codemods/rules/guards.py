"""Which blocks make an import of ``serverless_gpu`` a guarded one, left for a person (AM101, AM108).

A ``try:`` guards what it holds: ``try: from serverless_gpu import distributed / except ImportError: ...`` is
usually a fallback the author wants to keep. So is an ``if`` that chooses between the two packages: one of its
branches imports ``databricks.air`` (``if NEW: from databricks.air import ... / else: from serverless_gpu import
...``), or its test looks a module up (``importlib.util.find_spec(...)``, ``"serverless_gpu" in sys.modules``).
Any other ``if`` (``if __name__ == "__main__":``, ``if sys.version_info >= ...:``, ``if HAVE_GPU:``) is plain code:
its imports are migrated as any other, since ``databricks.air`` gives the very objects ``serverless_gpu`` does, in
whichever branch runs.
"""

from __future__ import annotations

import re
from typing import Callable, Optional

import libcst
from libcst.helpers import get_full_name_for_node

NEW = "databricks.air"
_LOOKS_UP_A_MODULE = re.compile(
    r"find_spec|find_loader|import_module|__import__|sys\.modules|serverless_gpu|"
    r"databricks|ImportError|ModuleNotFoundError"
)


_IMPORTS_NEW_PACKAGE = re.compile(
    r"^[ \t]*(?:from[ \t]+databricks\.air\b|import[ \t]+(?:[\w.]+[ \t]*,[ \t]*)*"
    r"databricks\.air\b)",
    re.MULTILINE,
)


def is_guard(node: libcst.CSTNode, code: Optional[Callable[[libcst.CSTNode], str]] = None) -> bool:
    """``node`` is a ``try`` (``try*``), or an ``if`` that chooses between ``serverless_gpu`` and ``databricks.air``.
    ``code`` gives a statement's code when the caller has it at hand (:meth:`Rule.statement_code`)."""
    if isinstance(node, (libcst.Try, libcst.TryStar)):
        return True
    if isinstance(node, libcst.If):
        test = libcst.Module(body=()).code_for_node(node.test)
        if _LOOKS_UP_A_MODULE.search(test) is not None:
            return True
        if code is not None and not _IMPORTS_NEW_PACKAGE.search(code(node)):
            return False  # (the cheap answer: no line of it imports databricks.air)
        return _imports_new_package(node)
    return False


def _imports_new_package(node: libcst.If) -> bool:
    finder = _NewImports()
    node.visit(finder)
    return finder.found


class _NewImports(libcst.CSTVisitor):
    """Whether a block imports ``databricks.air`` (or a module of it) anywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.found = False

    def on_visit(self, node: libcst.CSTNode) -> bool:
        if self.found or isinstance(node, libcst.BaseExpression):
            return False
        if isinstance(node, libcst.ImportFrom) and not node.relative and node.module is not None:
            self.found = _is_new(get_full_name_for_node(node.module))
            return False
        if isinstance(node, libcst.Import):
            self.found = any(_is_new(get_full_name_for_node(alias.name)) for alias in node.names)
            return False
        return True


def _is_new(dotted: "str | None") -> bool:
    return dotted == NEW or (dotted or "").startswith(NEW + ".")
