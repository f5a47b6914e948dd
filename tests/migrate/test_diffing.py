"""The unified diff of two texts: it takes the first to the second, hunk by hunk, with only the lines that differ
marked, on texts of any length."""

from __future__ import annotations

import random
from typing import List

from air_migrate.diffing import _lines, _unified


def _apply(before: List[str], diff: str) -> List[str]:
    """``before`` patched with ``diff`` (a unified diff whose lines all end in a line end), checking its context."""
    lines = diff.splitlines(keepends=True)[2:]
    out: List[str] = []
    at = 0
    index = 0
    while index < len(lines):
        header = lines[index].split()
        assert header[0] == "@@", lines[index]
        start, _, length = header[1][1:].partition(",")
        first = int(start) - (0 if length == "0" else 1)
        out += before[at:first]
        at = first
        index += 1
        while index < len(lines) and not lines[index].startswith("@@"):
            mark, text = lines[index][0], lines[index][1:]
            if mark in " -":
                assert before[at] == text
                at += 1
            if mark in " +":
                out.append(text)
            index += 1
    return out + before[at:]


def test_random_edits_of_long_and_short_texts_are_diffed_into_patches_that_apply() -> None:
    rng = random.Random(16)
    for _ in range(400):
        pool = ["\n", "\n", "    pass\n", "x = 1\n", *(f"line {n}\n" for n in range(rng.randint(1, 400)))]
        before = [rng.choice(pool) for _ in range(rng.randint(0, 600))]
        after = list(before)
        for _ in range(rng.randint(0, 8)):
            where = rng.randint(0, len(after))
            roll = rng.random()
            if roll < 0.4 and after:
                after[min(where, len(after) - 1)] = f"changed {rng.random()}\n"
            elif roll < 0.7:
                after.insert(where, rng.choice(["\n", "# TODO(air-migrate AM105): ...\n", "x = 1\n"]))
            elif after:
                del after[min(where, len(after) - 1)]
        diff = _unified(before, after, "a/f.py", "b/f.py")
        assert (diff == "") == (before == after)
        assert _apply(before, diff) == after


def test_one_changed_line_among_blank_lines_is_one_line_removed_and_one_added() -> None:
    before = _lines("".join(f"def f{n}():\n    pass\n\n\n" for n in range(100)))
    after = list(before)
    after[201] = "    return 1\n"
    changed = [line for line in _unified(before, after, "a", "b").splitlines() if line[:1] in "+-"][2:]
    assert changed == ["-    pass", "+    return 1"]
