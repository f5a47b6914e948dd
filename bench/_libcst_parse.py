"""The anchor of issue 31: a fresh process that parses every code cell of one file with libcst, nothing more.

``python _libcst_parse.py FILE`` reads the file as ``air-migrate`` does (its cells, with a Jupyter notebook's magics
masked: :func:`air_migrate.sources.read_source`, which does not import libcst), parses each Python cell with
``libcst.parse_module`` and prints how many it parsed. Its time, interpreter start-up and ``import libcst``
included, is what ``air-migrate`` on the same file is held against: at most 1.5 times it.
"""

from __future__ import annotations

import sys

import libcst

from air_migrate.sources import read_source


def main() -> int:
    path = sys.argv[1]
    with open(path, "rb") as stream:
        data = stream.read()
    parsed = failed = 0
    for cell in read_source(path, data).cells:
        if not cell.code or cell.text is None:
            continue
        try:
            libcst.parse_module(cell.text)
            parsed += 1
        except libcst.ParserSyntaxError:
            failed += 1
    print(f"{parsed} cell(s) parsed, {failed} not Python")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
