"""The comments inside code the ``TorchDistributor`` rewrite takes out, so that none is lost.

A distributor written over several lines often explains its settings (``num_processes=8,  # one per GPU``); those
settings become the new decorator's, so its comments move above it. Comments of an import that goes move to the
next statement, as the lines above it do.
"""

from __future__ import annotations

from typing import List, Sequence

import libcst


class _Comments(libcst.CSTVisitor):
    def __init__(self) -> None:
        super().__init__()
        self.found: List[str] = []

    def visit_Comment(self, node: libcst.Comment) -> None:
        self.found.append(node.value)


def comments_in(*nodes: libcst.CSTNode) -> List[str]:
    """Every comment inside ``nodes``, in order, as written (``# ...``)."""
    finder = _Comments()
    for node in nodes:
        node.visit(finder)
    return finder.found


def comment_lines(comments: Sequence[str]) -> List[libcst.EmptyLine]:
    """``comments`` as lines of their own, at the indentation of the statement they go above."""
    return [libcst.EmptyLine(indent=True, comment=libcst.Comment(comment)) for comment in comments]
