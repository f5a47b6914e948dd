"""Cutting a cell into its top-level statements without parsing it: the chunks are libcst's own statements, with
the lines libcst gives each one, and put together they are the text."""

from __future__ import annotations

from pathlib import Path
from typing import List

import libcst
import pytest

import air_migrate
from air_migrate.statements import split_statements


def libcst_chunks(text: str) -> List[str]:
    """What libcst makes of ``text``: each top-level statement's code, the header with the first, the footer with
    the last, as the module prints them."""
    module = libcst.parse_module(text)
    chunks = [module.code_for_node(statement) for statement in module.body]
    chunks[0] = "".join(module.code_for_node(line) for line in module.header) + chunks[0]
    chunks[-1] += "".join(module.code_for_node(line) for line in module.footer)
    if not module.has_trailing_newline:  # the module prints its last statement without its line end
        chunks[-1] = chunks[-1][: -len(module.default_newline)]
    return chunks


SOURCES = {
    "simple": "import os\nx = 1\ny = 2; z = 3\n",
    "header and footer": "#!/usr/bin/env python\n# -*- coding: utf-8 -*-\n\n'''Doc.'''\nimport os\n\n# the end\n",
    "decorators": "@a\n# between\n\n@b(\n    1)\nasync def f():\n    pass\n@c\nclass C: pass\n",
    "clauses": "if a:\n    pass\nelif b:\n    pass\nelse:\n    pass\ntry:\n    x\nexcept E:\n    y\n"
    "else:\n    z\nfinally:\n    w\nelsewhere = 1\n",
    "brackets": "x = [\n1,\n  2, (3,\n4)]\ncall(a,\n# comment\n     b)\n",
    "continuation": "x = 1 + \\\n2\nif a and \\\n   b:\n    pass\n",
    "strings": 's = """\nimport fake\n  """\nt = \'it\\\'s\'; u = "say \\"hi\\" # not a comment"\n'
    "v = r'\\\\'\nw = b'''x'''\n",
    "comments with quotes": "x = 1  # it's \"quoted\"\n# don't\ny = 2\n",
    "block footers": "def f():\n    pass\n    # owned\n\n# next\nx = 1\n",
    "less indented comment": "def f():\n    pass\n\n # not owned\nx = 1\n",
    "deeper and shallower comments": "def f():\n    if x:\n        pass\n    # four\n        # eight\n  # two\nx = 1\n",
    "owned after a shallower one": "if x:\n    pass\n  # two\n\n    # four\n\n\n# zero\ny = 2\n",
    "comment after a simple statement": "x = 1\n    # indented\ny = 2\n",
    "one-line compound": "if x: pass\n    # not a block's\nclass A: pass\n",
    "tabs": "def f():\n\tpass\n\t# tab\nx = 1\n",
    "crlf": "import os\r\n\r\ndef f():\r\n    pass\r\n    # owned\r\n\r\nx = 1\r\n",
    "no final newline": "import os\ndef f():\n    return 1",
    "match": "match p:\n    case 1:\n        pass\n    case _:\n        pass\nx = 1\n",
    "nested functions": "class C:\n    def f(self):\n        def g():\n            return 1\n\n        return g\n\n\n"
    "def h():\n    '''\ndef fake(): pass\n'''\n",
    "blank lines with spaces": "def f():\n    pass\n    \n    # owned\n  \nx = 1\n",
}


@pytest.mark.parametrize("text", SOURCES.values(), ids=SOURCES.keys())
def test_the_chunks_are_libcsts_statements_and_make_the_text(text: str) -> None:
    chunks = split_statements(text)
    assert chunks == libcst_chunks(text)
    assert "".join(chunks) == text


def test_every_module_of_air_migrate_is_cut_as_libcst_cuts_it() -> None:
    for path in sorted(Path(air_migrate.__file__).parent.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        if libcst.parse_module(text).body:
            assert split_statements(text) == libcst_chunks(text), path


@pytest.mark.parametrize(
    "text",
    [
        "",
        "# only a comment\n\n",
        "x = (1,\n",
        "x = 1)\n",
        "s = 'never closed\nx = 1\n",
        "s = '''never closed\n",
        "    indented = 1\n",
    ],
    ids=[
        "empty",
        "no statement",
        "open bracket",
        "closing bracket",
        "unterminated string",
        "unterminated triple-quoted string",
        "indented first statement",
    ],
)
def test_what_the_scan_cannot_follow_is_left_to_the_parser(text: str) -> None:
    assert split_statements(text) is None
