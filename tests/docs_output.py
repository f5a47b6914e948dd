"""Whether a page's ```` ```text ```` block shows what the block before it really printed.

A ```` ```text ```` block that follows an executed block (only blank lines between) shows that block's output:
everything it wrote to stdout and stderr, the library's own lines included, in order. ``tests/test_docs.py``
compares the two after masking what changes from run to run on both sides:

* absolute paths (``/tmp/databricks-air-logs/20261129-101500-hello-k2j4x8qz``) and ``sqlite:///...`` URIs;
* 32-digit hexadecimal ids (MLflow run ids), ``0x`` addresses, ``HOST:PORT`` pairs, ``pid N``;
* durations (``2.5 s``, ``10800 s``) and dates with times.

Numbers are not masked, so a page cannot show losses the code does not produce. Where a value really varies,
write ``...`` for it: within a line ``...`` matches any text, and a line that is only ``...`` matches any number of
lines. A block whose output cannot be shown faithfully (ranks racing each other, say) says why on the line before
it: ``<!-- not-checked: reason -->``; so does every ```` ```text ```` block that follows prose rather than code
(``tests/docs_blocks.py`` reports one that does not).
"""

from __future__ import annotations

import difflib
import re
from typing import List, Optional, Sequence

BANNER = "=" * 8 + " "

_MASKS = [
    (re.compile(r"\b\d{4}([-/])\d{2}\1\d{2}[ T]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?\b"), "<date>"),
    (re.compile(r"\b(sqlite|file):/{2,3}[^\s;,)]+"), r"\1:///<path>"),
    (re.compile(r"(?<![\w.:/<>-])(?:~|\.{1,2})?/(?:[\w.@+=-]+/)*[\w.@+=-]+/?"), "<path>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<id>"),
    (re.compile(r"\b0x[0-9a-fA-F]+\b"), "<address>"),
    (re.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}:\d+\b"), "<host:port>"),
    (re.compile(r"\bpid \d+\b"), "pid <n>"),
    (re.compile(r"\b\d+(?:\.\d+)?(?: ?s|s)\b"), "<time>"),
]


def masked(text: str) -> List[str]:
    """The lines of ``text`` with what varies between runs masked, trailing spaces and outer blank lines gone."""
    lines = []
    for line in text.splitlines():
        for pattern, replacement in _MASKS:
            line = pattern.sub(replacement, line)
        lines.append(line.rstrip())
    while lines and not lines[0]:
        lines.pop(0)
    while lines and not lines[-1]:
        lines.pop()
    return lines


def line_matches(expected: str, actual: str) -> bool:
    """Whether one masked line of a page shows ``actual``: equal, or with each ``...`` standing for any text."""
    if "..." not in expected:
        return expected == actual
    pattern = ".*".join(re.escape(part) for part in expected.split("..."))
    return re.fullmatch(pattern, actual) is not None


def _matches(expected: Sequence[str], actual: Sequence[str]) -> bool:
    if not expected:
        return not actual
    if expected[0] == "...":
        return any(_matches(expected[1:], actual[skip:]) for skip in range(len(actual) + 1))
    return bool(actual) and line_matches(expected[0], actual[0]) and _matches(expected[1:], actual[1:])


def mismatch(expected: str, actual: str) -> Optional[str]:
    """``None`` when ``actual`` is what ``expected`` shows; else a diff of the two, masked, to fix the page by."""
    want, got = masked(expected), masked(actual)
    if _matches(want, got):
        return None
    return "\n".join(difflib.unified_diff(want, got, "the page shows", "the run printed", lineterm=""))


def block_outputs(runner_output: str) -> dict:
    """What each block printed, from the page runner's output: ``{block number: text}``.

    The runner prints ``======== PAGE, block N (line L, LANGUAGE)`` before each block and a ``FAILED`` line after a
    failing one; everything between two banners is the output of the block the first one names.
    """
    outputs: dict = {}
    current: Optional[int] = None
    for line in runner_output.splitlines(keepends=True):
        if line.startswith(BANNER):
            found = re.search(r", block (\d+) \(line \d+, \w+\)$", line.rstrip("\n"))
            current = int(found.group(1)) if found and " FAILED: " not in line else None
            if current is not None:
                outputs[current] = ""
            continue
        if current is not None:
            outputs[current] += line
    return outputs
