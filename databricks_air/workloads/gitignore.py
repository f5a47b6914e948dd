"""``.gitignore`` rules, as git reads them, for snapshots of a working tree (no git needed).

Supported: comments, escapes (``\\#``, ``\\!``, trailing ``\\ ``), negation (``!``), directory-only patterns
(trailing ``/``), patterns anchored by a ``/`` anywhere but at the end, ``*``, ``?``, ``[...]`` and ``**``
(leading ``**/``, trailing ``/**``, inner ``/**/``); each file's rules apply below its folder; the last matching
rule wins; and, as in git, nothing below an ignored folder can be re-included.
"""

from __future__ import annotations

import dataclasses
import os
import re
import stat
from typing import List, Optional


MAX_IGNORE_FILE_BYTES = 1 << 20
"""What is read of one ignore file (a larger one is no list of patterns)."""


@dataclasses.dataclass(frozen=True)
class Rule:
    base: str
    """The folder of the ``.gitignore`` that holds the rule, relative to the walk's top ("" for the top)."""
    regex: "re.Pattern[str]"
    negated: bool
    directory_only: bool


def _translate(glob: str) -> str:
    out = []
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i) and (i == 0 or glob[i - 1] == "/"):
            out.append("(?:.*/)?")
            i += 3
        elif glob.startswith("**", i) and i + 2 == len(glob) and (i == 0 or glob[i - 1] == "/"):
            out.append(".*")
            i += 2
        elif glob[i] == "*":
            out.append("[^/]*")
            i += 1
        elif glob[i] == "?":
            out.append("[^/]")
            i += 1
        elif glob[i] == "[":
            end = glob.find("]", i + 2 if glob[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end < 0:
                out.append(re.escape("["))
                i += 1
                continue
            body = glob[i + 1 : end]
            if body[:1] in ("!", "^"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
        elif glob[i] == "\\" and i + 1 < len(glob):
            out.append(re.escape(glob[i + 1]))
            i += 2
        else:
            out.append(re.escape(glob[i]))
            i += 1
    return "".join(out)


def parse_line(line: str, base: str) -> Optional[Rule]:
    """One line of a ``.gitignore`` in folder ``base``; ``None`` for blanks and comments."""
    line = line.rstrip("\n").rstrip("\r")
    if not line or line.startswith("#"):
        return None
    while line.endswith(" ") and not line.endswith("\\ "):
        line = line[:-1]
    if not line:
        return None
    negated = line.startswith("!")
    if negated:
        line = line[1:]
    elif line.startswith("\\!") or line.startswith("\\#"):
        line = line[1:]
    directory_only = line.endswith("/")
    line = line.rstrip("/")
    if not line:
        return None
    anchored = "/" in line
    line = line.lstrip("/")
    body = _translate(line)
    regex = f"^{body}$" if anchored else f"^(?:.*/)?{body}$"
    return Rule(base, re.compile(regex), negated, directory_only)


class IgnoreRules:
    """The rules in force at some folder: those of every ``.gitignore`` from the top down to it."""

    def __init__(self, rules: Optional[List[Rule]] = None) -> None:
        self.rules = rules or []

    def with_file(self, path: str, base: str) -> "IgnoreRules":
        """These rules plus those of the ignore file ``path`` (``base``: its folder relative to the top)."""
        try:  # without blocking: a FIFO named .gitignore would wait for a writer forever
            descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
        except OSError:
            return self
        try:
            if not stat.S_ISREG(os.fstat(descriptor).st_mode):
                return self  # a FIFO, a device: no rules
            with os.fdopen(os.dup(descriptor), "rb") as stream:
                lines = stream.read(MAX_IGNORE_FILE_BYTES).decode("utf-8", errors="replace").split("\n")
        except OSError:
            return self
        finally:
            os.close(descriptor)
        added = [rule for rule in (parse_line(line, base) for line in lines) if rule is not None]
        return IgnoreRules(self.rules + added) if added else self

    def ignored(self, relative: str, is_dir: bool) -> bool:
        """Whether ``relative`` (a ``/``-separated path from the top) is ignored by these rules."""
        verdict = False
        for rule in self.rules:
            if rule.directory_only and not is_dir:
                continue
            if rule.base:
                if not relative.startswith(rule.base + "/"):
                    continue
                inside = relative[len(rule.base) + 1 :]
            else:
                inside = relative
            if rule.regex.match(inside):
                verdict = not rule.negated
        return verdict


def rules_above(root: str) -> "tuple[IgnoreRules, str]":
    """The rules that apply to ``root`` from the git repository above it, and root's path inside that repository.

    Outside a repository: no rules, and "" (root is its own top).
    """
    root = os.path.abspath(root)
    top = root
    while not os.path.exists(os.path.join(top, ".git")):
        parent = os.path.dirname(top)
        if parent == top:
            return IgnoreRules(), ""
        top = parent
    rules = IgnoreRules().with_file(os.path.join(top, ".git", "info", "exclude"), "")
    prefix = os.path.relpath(root, top).replace(os.sep, "/")
    if prefix == ".":
        return rules, ""
    folder = top
    base = ""
    for part in prefix.split("/"):
        rules = rules.with_file(os.path.join(folder, ".gitignore"), base)
        folder = os.path.join(folder, part)
        base = f"{base}/{part}" if base else part
    return rules, prefix
