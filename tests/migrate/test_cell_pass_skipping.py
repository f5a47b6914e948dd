"""The cell pass traverses only the statements some rule asks for (top-level ones, and nested ones in those), and
still finds every launch call, whatever name it is imported under
(:meth:`air_migrate.rule_base.Rule.statement_words`)."""

from __future__ import annotations

from typing import Collection, List, Optional

import libcst
import pytest
from rule_helpers import run_rules

from air_migrate.engine import migrate_file
from air_migrate.rules import REGISTRY, Rule

RULES = [REGISTRY[code] for code in sorted(REGISTRY)]
PLAIN = "def helper(x):\n    return [y * 2 for y in range(x)]\n\n\nhelper(3)\n"


class _Counting(Rule):
    """Records the names it is shown; asks for statements holding ``wanted`` (or all, with ``None``)."""

    CODE = "T001"
    DESCRIPTION = "test"
    words: Optional[Collection[str]] = ("wanted",)
    seen: List[str] = []

    def statement_words(self) -> Optional[Collection[str]]:
        return self.words

    def visit_Name(self, node: libcst.Name) -> None:
        self.seen.append(node.value)


class _All(_Counting):
    words = None


def _seen(rule: type, source: str) -> List[str]:
    _Counting.seen = []
    run_rules([rule], libcst.parse_module(source))
    return _Counting.seen


def test_statements_without_a_requested_word_are_not_traversed() -> None:
    seen = _seen(_Counting, PLAIN + "wanted = helper(2)\n")
    assert seen == ["wanted", "helper"]


def test_nested_statements_without_a_requested_word_are_not_traversed_either() -> None:
    seen = _seen(_Counting, "def f(a):\n    b = a\n    if b:\n        c = 1\n        wanted = c\n    return b\n")
    assert seen == ["f", "a", "b", "wanted", "c"]  # the def's header, the if's test, the statement with the word


@pytest.mark.parametrize(
    "source, seen",
    [  # A def or class whose words are all in its decorators and signature has its body passed over at once.
        ("@wanted(n=2)\ndef f(a):\n    b = a\n    return b\n", ["wanted", "n", "f", "a"]),
        ("class C:  # wanted in a comment\n    x = 1\n", ["C"]),
        # A word in the body too (in a statement, a comment above one, the block's last comment): it is looked at.
        ("@wanted\ndef f(a):\n    b = a\n    return wanted(b)\n", ["wanted", "f", "a", "wanted", "b"]),
        ("@wanted\ndef f(a):\n    # wanted\n    return a\n", ["wanted", "f", "a", "a"]),
        ("@wanted\ndef f(a):\n    return a\n    # wanted\n", ["wanted", "f", "a"]),
        ("class wanted:\n    def m(self):\n        wanted = 1\n", ["wanted", "m", "self", "wanted"]),
    ],
    ids=["signature", "comment-after-colon", "body", "comment-above", "footer-comment", "nested"],
)
def test_a_body_with_no_word_is_passed_over_whole(source: str, seen: List[str]) -> None:
    assert _seen(_Counting, source) == seen


def test_a_rule_that_needs_every_statement_sees_them_all() -> None:
    seen = _seen(_All, PLAIN)
    assert "y" in seen and "helper" in seen


def test_one_rule_that_needs_everything_makes_every_statement_traversed() -> None:
    _Counting.seen = []
    run_rules([_Counting, _All], libcst.parse_module(PLAIN))
    assert _Counting.seen.count("helper") == 4  # both rules saw the def and the call


def test_an_aliased_launcher_is_found_in_a_statement_that_never_spells_a_trigger_word() -> None:
    source = "from serverless_gpu import distributed as launch\n" + PLAIN + "@launch(**options)\ndef f(): ...\n"
    result = migrate_file("job.py", source.encode(), RULES)
    assert [(r.line, r.code, r.severity) for r in result.records if r.code == "AM102"] == [(7, "AM102", "blocking")]


class _SeesEverything(Rule):
    """Changes nothing, needs every statement: with it, the pass traverses the whole cell as before skipping."""

    CODE = "T002"
    DESCRIPTION = "test"


ALIASED = [
    "import databricks.air as air_runtime  # was serverless_gpu\n"
    + PLAIN
    + "air_runtime.distributed(run, **options)\n",
    "from serverless_gpu.compute import GPUType as Kind\n"
    + PLAIN
    + "from serverless_gpu import distributed\n@distributed(gpus=1, gpu_type=Kind.A10)\ndef f(): ...\n"
    + "chosen = Kind.H100\nprint(Kind)\n",
    "from serverless_gpu.compute import GPUType as Kind\nfrom serverless_gpu import distributed\n"
    + PLAIN
    + "def AcceleratorType(): ...\n@distributed(gpus=1, gpu_type=Kind.A10)\ndef f(): ...\n",
    "import serverless_gpu as sg\n" + PLAIN + "@sg.distributed(gpus=2)\ndef g(): ...\nx = sg\n",
    "from databricks import air\nimport serverless_gpu\n"
    + PLAIN
    + "run = air.ray_launch(gpus=4, gpu_type='H100')(helper)\ny = serverless_gpu.compute\n",
    "try:\n    from serverless_gpu import distributed as d\nexcept ImportError:\n    d = None\n"
    + PLAIN
    + "@d(gpus=1, gpu_type='A10')\ndef h(): ...\nh.with_overrides(gpus=2)\n",
    # In the bodies of functions, classes and blocks, among statements that hold no word:
    "import serverless_gpu as sg\ndef main():\n    "
    + PLAIN.replace("\n", "\n    ")
    + "for i in range(2):\n        x = i\n        if x:\n            run = sg.distributed(gpus=8, gpu_type='H100')(f)\n"
    "    return helper(2)\n",
    'class Jobs:\n    """Uses serverless_gpu."""\n    def build(self):\n        from serverless_gpu import ray_launch\n'
    "        y = 1\n        @ray_launch(gpus=2, gpu_type='A10')\n        def inner(): ...\n        return inner\n"
    "    def other(self):\n        return 2\n",
]


@pytest.mark.parametrize("source", ALIASED)
def test_skipping_finds_and_changes_exactly_what_a_whole_traversal_does(source: str) -> None:
    skipping = migrate_file("job.py", source.encode(), RULES)
    whole = migrate_file("job.py", source.encode(), [*RULES, _SeesEverything])
    assert skipping.records and skipping.records == whole.records
    assert skipping.migrated == whole.migrated


class _ReportsNames(Rule):
    """Reports every name in the statements that mention ``wanted``."""

    CODE = "T003"
    DESCRIPTION = "test"

    def statement_words(self) -> Optional[Collection[str]]:
        return ("wanted",)

    def visit_Name(self, node: libcst.Name) -> None:
        self.report(node, node.value)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_positions_computed_per_statement_are_those_of_the_whole_cell(newline: str) -> None:
    source = (
        "# header comment\n\n"
        + PLAIN
        + "\n# leading comment\n\nwanted = (\n    helper(1),\n    helper(2))\n"
        + "if True:\n\n    # inside\n    wanted += [helper(\n        3)]\nclass C:\n    '''doc\n    wanted'''\n"
    ).replace("\n", newline)
    module = libcst.parse_module(source)
    findings = run_rules([_ReportsNames], module).findings
    whole = libcst.metadata.MetadataWrapper(module, unsafe_skip_copy=True).resolve(libcst.metadata.PositionProvider)
    expected = sorted(
        (where.start.line, where.start.column + 1, where.end.line, where.end.column + 1, node.value)
        for node, where in whole.items()
        if isinstance(node, libcst.Name) and where.start.line >= 8
    )
    assert len(findings) == 7  # wanted, helper x2; True, wanted, helper; C
    assert sorted((f.line, f.column, f.end_line, f.end_column, f.message) for f in findings) == expected
