"""Parsing only the statements the rules ask for gives the very result of parsing everything, at the cost of what
matters; what cannot be checked that way is parsed whole."""

from __future__ import annotations

from pathlib import Path
from typing import FrozenSet, List, Optional

import libcst
import pytest
from golden_harness import as_script, case_names

from air_migrate import cell_pass
from air_migrate.cell_context import PrefixImport
from air_migrate.engine import migrate_file
from air_migrate.partial_parse import RawStatement, parse_partly
from air_migrate.results import FileResult
from air_migrate.rule_base import CellContext, Rule
from air_migrate.rules import REGISTRY
from air_migrate.statements import split_statements

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
GOLDEN = Path(__file__).parent / "golden"
FILLER = "".join(f"def helper_{n}(x):\n    return [y * {n} for y in range(x)]\n\n\n" for n in range(200))


def _fixed(*words: str):  # type: ignore[no-untyped-def]
    return lambda text: frozenset(words)


def test_only_the_statements_holding_a_word_are_parsed_and_the_module_prints_as_the_text() -> None:
    text = "# top\n\nimport os\n" + FILLER + "wanted = helper_1(2)\n# end\n"
    partial = parse_partly([], split_statements(text), _fixed("wanted"))
    assert partial is not None and partial.module.code == text
    parsed = [s for s in partial.module.body if not isinstance(s, RawStatement)]
    assert [partial.module.code_for_node(s) for s in parsed] == ["\n\nwanted = helper_1(2)\n"]
    assert partial.text == "\n\nwanted = helper_1(2)\n# end\n"  # (the blank lines above it are its own)
    assert len(partial.module.body) == 202


def test_the_first_statement_keeps_the_lines_above_it_whether_it_is_parsed_or_not() -> None:
    text = "# licence\n\nimport wanted\nx = 1\n"
    first = parse_partly([], split_statements(text), _fixed("wanted"))
    assert first is not None and first.module.code == text
    assert [line.comment.value for line in first.module.header if line.comment] == ["# licence"]  # as libcst
    text = "# licence\n\nx = 1\n# about it\nwanted = 2\n"
    later = parse_partly([], split_statements(text), _fixed("wanted"))
    assert later is not None and later.module.code == text
    assert later.module.code_for_node(later.module.body[1]) == "# about it\nwanted = 2\n"


def test_the_words_asked_for_grow_with_the_text_they_select() -> None:
    """The rules ask for the names the selected imports bind, which selects the statements using them."""
    text = "from pkg import tool as alias\n" + FILLER + "alias(1)\nother(2)\n"

    def words_for(selected: str) -> FrozenSet[str]:
        return frozenset({"pkg"} | ({"alias"} if "as alias" in selected else set()))

    partial = parse_partly([], split_statements(text), words_for)
    assert partial is not None
    assert partial.text == "from pkg import tool as alias\n\n\nalias(1)\n"


def test_the_earlier_cells_imports_are_kept_only_when_they_hold_a_word() -> None:
    prefix = ["import torch\n", "from wanted import x\n"]
    partial = parse_partly(prefix, split_statements("y = 1\nwanted.z()\n"), _fixed("wanted"))
    assert partial is not None
    assert list(partial.prefix_kept) == [1]
    assert partial.module.code == "from wanted import x\ny = 1\nwanted.z()\n"


@pytest.mark.parametrize(
    "text",
    [
        "wanted = 1\nx = (\n",  # the scan cannot follow it
        "wanted = 1\nx = = 2\n",  # a statement left unparsed is not Python
    ],
    ids=["scan", "syntax"],
)
def test_what_cannot_be_checked_in_part_is_left_to_the_whole_parse(text: str) -> None:
    chunks = split_statements(text)
    assert chunks is None or parse_partly([], chunks, _fixed("wanted")) is None


def test_a_rule_that_must_see_everything_gets_a_whole_parse() -> None:
    assert parse_partly([], split_statements("x = 1\n"), lambda text: None) is None


def test_a_syntax_error_away_from_any_old_api_still_fails_the_script_where_python_says() -> None:
    source = "from serverless_gpu import distributed\n" + FILLER + "def broken(:\n    pass\n"
    result = migrate_file("job.py", source.encode(), RULES)
    assert result.error is not None and result.error.startswith("cannot parse")
    assert [(record.code, record.line) for record in result.records] == [("AM903", 802)]
    assert result.migrated is None


@pytest.mark.parametrize(
    "text",
    [
        "# licence\n\nimport wanted\nx = 1\n",
        "x = 1\n# about it\nwanted = 2\n# trailing\n\n",
        "class A:\n    wanted = 1\n\n    # the end of its block\n\nif wanted:\n    pass\n# footer\n",
        "\n\n@wanted\ndef f():\n    return 1\n\n\ny = 2",
    ],
)
def test_the_code_a_partial_parse_gives_for_each_statement_is_what_libcst_prints(text: str) -> None:
    partial = parse_partly(["import wanted as w\n"], split_statements(text), _fixed("wanted"))
    assert partial is not None and partial.codes
    for statement, code in partial.codes.items():
        assert code == partial.module.code_for_node(statement)


def test_a_large_script_is_parsed_only_where_it_mentions_the_old_api() -> None:
    text = (
        "import serverless_gpu as sg\n"
        + FILLER
        + "@sg.distributed(gpus=2)\ndef train():\n"
        + "".join(f"    step_{n}()\n" for n in range(100))
    )
    context = CellContext(1, text="")
    prepared = cell_pass.prepare_cell(
        text, [PrefixImport("import os\n", 1, 1)], [r for r in RULES if issubclass(r, Rule)], context
    )
    assert prepared.partial is not None
    assert prepared.context.text.startswith("import serverless_gpu as sg\n\n\n@sg.distributed(gpus=2)\n")
    assert prepared.context.prefix == ()  # `import os` holds no word any rule asks for
    assert "helper_" not in prepared.context.text


class _BrokenRule(Rule):
    """A rule with a bug: it writes code that does not parse, in a statement it asked for."""

    CODE = "AM998"
    DESCRIPTION = "test only"

    def statement_words(self) -> Optional[List[str]]:
        return ["broken_here"]

    def leave_Assign(self, original_node: libcst.Assign, updated_node: libcst.Assign) -> libcst.Assign:
        target = updated_node.targets[0].with_changes(target=libcst.Integer("1"))
        return updated_node.with_changes(targets=[target])  # `1 = ...`


def test_a_statement_a_rule_broke_is_caught_by_the_check_of_what_changed() -> None:
    source = "import serverless_gpu\n" + FILLER + "broken_here = 1\n"
    result = migrate_file("job.py", source.encode(), [*RULES, _BrokenRule])
    assert result.migrated is None
    assert result.error == "internal error: the migrated cell 1 would not parse, so the file is left as it is"


def _whole(monkeypatch: pytest.MonkeyPatch, path: str, data: bytes, **options: bool) -> FileResult:
    with monkeypatch.context() as patched:
        patched.setattr(cell_pass, "split_statements", lambda text: None)
        return migrate_file(path, data, RULES, **options)


@pytest.mark.parametrize("case", case_names(GOLDEN / "serverless_gpu") + case_names(GOLDEN / "torch_distributor"))
def test_a_partial_parse_gives_what_a_whole_parse_gives_on_every_golden_case(
    case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = GOLDEN / ("serverless_gpu" if (GOLDEN / "serverless_gpu" / case).is_dir() else "torch_distributor")
    source = (folder / case / "input.py").read_text()
    path, text = ("script.py", as_script(source)) if as_script(source) is not None else ("databricks.py", source)
    for options in ({}, {"todo_comments": True}):
        partial = migrate_file(path, text.encode(), RULES, **options)
        whole = _whole(monkeypatch, path, text.encode(), **options)
        assert (partial.records, partial.migrated, partial.error) == (whole.records, whole.migrated, whole.error)
