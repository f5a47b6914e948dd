"""The fenced code blocks of a Markdown page, and what the documentation convention says to do with each.

Convention (enforced by ``tests/test_docs.py``):

* ```` ```python ```` blocks are executed, in order, one fresh process per page (the page's blocks share a namespace);
* ```` ```bash ```` blocks are executed with ``bash -e``, in the same working directory, in page order;
* ```` ```text ```` blocks show output and are never executed; one that follows an executed block (nothing but
  blank lines between) shows that block's output, and the tests compare the two (``tests/docs_output.py``) unless
  the line before it is ``<!-- not-checked: <reason> -->``. Any other ```` ```text ```` block (after prose, or
  after a block that does not run) is checked by nothing, so it must say why on the line before it:
  ``<!-- not-checked: <reason> -->``; otherwise put it right after the code that prints it;
* any block preceded by a line ``<!-- not-run: <reason> -->`` (blank lines may separate them) is not executed;
  the reason is required;
* a line ``<!-- requires: module, module -->`` anywhere on a page names optional packages its blocks import: the
  page's blocks are skipped (not failed) where one of them is not installed;
* any other block (another language, or none) is an error: mark it or change its language.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from typing import List, Optional

EXECUTED = ("python", "bash")
SHOWN = ("text",)

_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
_MARKER = re.compile(r"^\s*<!--\s*(?P<kind>not-run|not-checked)\b(?P<rest>.*?)-->\s*$")
_MARKER_START = re.compile(r"^\s*<!--\s*(?P<kind>not-run|not-checked)\b")
_REQUIRES = re.compile(r"^\s*<!--\s*requires:(?P<modules>.*?)-->\s*$")


@dataclasses.dataclass
class Block:
    """One fenced code block of a page."""

    number: int
    """1-based position among the page's fenced blocks."""
    line: int
    """1-based line of the opening fence."""
    language: str
    """First word of the info string, lower case ("" when there is none)."""
    code: str
    """The block's content, without the fence's indentation."""
    not_run_reason: Optional[str] = None
    """The reason given by a ``<!-- not-run: ... -->`` marker, when the block has one."""
    output_of: Optional[int] = None
    """For a ```text block right after an executed block: that block's number (the text shows its output)."""
    not_checked_reason: Optional[str] = None
    """The reason given by a ``<!-- not-checked: ... -->`` marker: the text is not compared with the output."""

    @property
    def checked_output_of(self) -> Optional[int]:
        """The block whose real output this block must match, unless it is marked not-checked."""
        return self.output_of if self.not_checked_reason is None else None

    @property
    def executed(self) -> bool:
        return self.not_run_reason is None and self.language in EXECUTED


@dataclasses.dataclass
class Page:
    """A page's blocks, and the ways it breaks the convention."""

    path: Path
    blocks: List[Block]
    problems: List[str]
    requires: List[str] = dataclasses.field(default_factory=list)
    """The modules named by ``<!-- requires: ... -->`` lines."""

    @property
    def executed_blocks(self) -> List[Block]:
        return [block for block in self.blocks if block.executed]


def read_page(path: Path) -> Page:
    """Parse the Markdown file at ``path``."""
    return parse_page(path.read_text(encoding="utf-8"), path)


def parse_page(text: str, path: Path = Path("<page>")) -> Page:
    """Find every fenced block of ``text`` and check it against the convention."""
    lines = text.splitlines()
    blocks: List[Block] = []
    problems: List[str] = []
    pending_marker: Optional[tuple] = None  # (line number, kind, reason or None when malformed)
    prose_since_block = True  # whether anything but blank lines and markers came after the last block
    index = 0
    while index < len(lines):
        line = lines[index]
        opening = _FENCE_OPEN.match(line)
        if opening is None or (opening.group("fence")[0] == "`" and "`" in opening.group("info")):
            start = _MARKER_START.match(line)
            if start:
                if pending_marker is not None:
                    problems.append(_dangling(pending_marker[0]))
                pending_marker = (index + 1, start.group("kind"), _marker_reason(line))
            elif line.strip():
                prose_since_block = True
                if pending_marker is not None:
                    problems.append(_dangling(pending_marker[0]))
                    pending_marker = None
            index += 1
            continue
        indent, fence = opening.group("indent"), opening.group("fence")
        info = opening.group("info").strip()
        language = info.split()[0].strip("{}.").lower() if info else ""
        opening_line = index + 1
        body: List[str] = []
        index += 1
        closed = False
        while index < len(lines):
            candidate = lines[index]
            stripped = candidate.strip()
            if stripped.startswith(fence[0] * len(fence)) and set(stripped) == {fence[0]}:
                closed = True
                index += 1
                break
            body.append(candidate[len(indent) :] if candidate.startswith(indent) else candidate.lstrip())
            index += 1
        number = len(blocks) + 1
        block = Block(number=number, line=opening_line, language=language, code="\n".join(body) + "\n")
        where = f"block {number} (line {opening_line}, ```{language or '<no language>'})"
        if not closed:
            problems.append(f"{where} is never closed")
        if language == "text" and blocks and blocks[-1].executed and not prose_since_block:
            block.output_of = blocks[-1].number
        if pending_marker is not None:
            marker_line, kind, reason = pending_marker
            pending_marker = None
            if reason is None:
                why = "why it cannot run" if kind == "not-run" else "why its output is not compared"
                problems.append(f"{where}: the marker on line {marker_line} needs a reason: <!-- {kind}: {why} -->")
            elif kind == "not-run":
                block.not_run_reason = reason
            elif language not in SHOWN:
                problems.append(f"{where}: not-checked (line {marker_line}) marks a ```text block, not this one")
            else:
                block.not_checked_reason = reason
        if language in SHOWN and block.output_of is None and block.not_checked_reason is None:
            after = "a block that does not run" if blocks and not prose_since_block else "prose"
            problems.append(
                f"{where} follows {after}, so no run checks it: put it right after the code that prints it, "
                "or say why it cannot be on the line before it: <!-- not-checked: <reason> -->"
            )
        if block.not_run_reason is None and block.language not in EXECUTED + SHOWN:
            if not any(problem.startswith(where) for problem in problems):
                problems.append(
                    f"{where} is neither executed nor marked: use ```python or ```bash for code the tests run, "
                    "```text for output, or put <!-- not-run: <reason> --> on the line before it"
                )
        blocks.append(block)
        prose_since_block = False
    if pending_marker is not None:
        problems.append(_dangling(pending_marker[0]))
    requires = [
        name.strip()
        for line in lines
        for match in [_REQUIRES.match(line)]
        if match is not None
        for name in match.group("modules").split(",")
        if name.strip()
    ]
    return Page(path=path, blocks=blocks, problems=problems, requires=requires)


def _marker_reason(line: str) -> Optional[str]:
    """The reason of a well-formed ``<!-- not-run: reason -->`` line; ``None`` when it has none."""
    match = _MARKER.match(line)
    if match is None:
        return None
    rest = match.group("rest").strip()
    if not rest.startswith(":"):
        return None
    reason = rest[1:].strip()
    return reason or None


def _dangling(line: int) -> str:
    return f"the not-run marker on line {line} is not followed by a fenced block (it must be the line before one)"
