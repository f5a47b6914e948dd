"""Why a cell does not parse, in the words of Python's own parser, and whether the line looks like a shell line.

libcst says only which tokens it expected (``expected one of !=, %, &, ...``); Python's parser names the problem
(``'(' was never closed``) and the place where it starts. So when libcst cannot parse a cell, the cell's text is
given to :func:`ast.parse` too, and what it says is what the report says. Only if Python itself accepts the text
(a construct libcst does not know yet) is libcst's own message shown.

In a notebook, a Python cell that does not parse is most often a bare magic or shell command (``%cd``, ``pip
install``) that the notebook runs and Python does not: :func:`looks_like_shell` tells those lines from a syntax error
in real Python, which deserves the parser's message rather than a guess.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import warnings
from typing import Tuple

import libcst

# Commands a notebook runs from a bare line (IPython's automagics, and what people type in a Databricks cell).
_SHELL_COMMANDS = frozenset(
    {
        "apt",
        "apt-get",
        "cat",
        "cd",
        "chmod",
        "conda",
        "cp",
        "curl",
        "echo",
        "export",
        "git",
        "ls",
        "mamba",
        "mkdir",
        "mv",
        "nvidia-smi",
        "pip",
        "pip3",
        "pwd",
        "rm",
        "sudo",
        "tar",
        "unzip",
        "wget",
    }
)
_LIBCST_POSITION = re.compile(r"error at (\d+):(\d+)")


@dataclasses.dataclass(frozen=True)
class SyntaxProblem:
    """Where a text stops being Python (1-based, in the text given) and what the parser said about it."""

    line: int
    column: int
    message: str
    """One line, without a position (the report puts that first)."""


def libcst_position(error: libcst.ParserSyntaxError) -> Tuple[int, int]:
    """The 1-based line and column of a libcst parse error (the native parser's own ``raw_line`` runs one line
    late, so the position in its message is preferred)."""
    found = _LIBCST_POSITION.search(error.message)
    if found:
        return int(found.group(1)), int(found.group(2))
    return error.raw_line, error.raw_column + 1


def describe(text: str, error: libcst.ParserSyntaxError, lines_before: int = 0) -> SyntaxProblem:
    """Why ``text`` does not parse: Python's message and position when Python rejects it too, else libcst's.

    ``error`` is libcst's, for ``text`` with ``lines_before`` lines of other code before it.
    """
    line, column = libcst_position(error)
    line = max(line - lines_before, 1)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an invalid escape sequence is not what the report is about
            ast.parse(text)
    except SyntaxError as python_error:
        if python_error.lineno is None:  # (a null byte, on some versions): libcst's position, Python's words
            return SyntaxProblem(line, column, python_error.msg)
        return SyntaxProblem(python_error.lineno, max(python_error.offset or 1, 1), python_error.msg)
    except ValueError as python_error:  # a null byte, on other versions
        return SyntaxProblem(line, column, str(python_error))
    said = " ".join(error.message.split())
    return SyntaxProblem(line, column, f"libcst cannot parse it ({said})")


def looks_like_shell(line: str) -> bool:
    """A line a notebook runs and Python does not: a magic (``%cd``, ``!ls``) or a bare command (``pip install``)."""
    stripped = line.strip()
    if stripped.startswith(("%", "!")):
        return True
    words = stripped.split(None, 1)
    if not words or words[0] not in _SHELL_COMMANDS:
        return False
    # `pip install x`, `cd /dbfs/x`, `ls -la`: not `cat = load(` or `cd(path`, Python that happens to use the word.
    return len(words) == 1 or words[1][0] not in "=([.,:)"
