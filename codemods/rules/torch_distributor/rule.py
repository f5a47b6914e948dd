"""AM201: Spark's ``TorchDistributor(...).run(fn, ...)`` becomes ``@distributed(...)`` on ``fn`` and
``fn.distributed(...)``.

In a file (or notebook) that mentions ``TorchDistributor``, every cell that mentions a name the rewrite can concern
is parsed and surveyed first (:mod:`~air_migrate.rules.torch_distributor.file_scan`,
:mod:`~air_migrate.rules.torch_distributor.survey`), since a notebook builds its distributor in one cell, runs it in
another and defines the function in a third; then the planner decides the whole file at once
(:mod:`~air_migrate.rules.torch_distributor.plan`), and this rule makes each cell's part of it:

* ``@distributed(num_accelerators=N, timeout=None)`` goes above ``def fn``, before its other decorators (so it wraps
  what ``TorchDistributor`` ran), below its comments; ``num_processes=torch.cuda.device_count()`` gives
  ``@distributed(timeout=None)``, every GPU; ``use_gpu=False`` adds ``accelerator_type="CPU"`` (``AM203``).
  ``timeout=None`` keeps what ``TorchDistributor.run`` did, run without a time limit, where ``@distributed`` would
  stop a call after 3 hours by default; it is reported for review (``AM218``), saying how to choose a cap;
* ``d.run(fn, *args)`` and ``TorchDistributor(...).run(fn, *args)`` become ``fn.distributed(*args)``, the arguments'
  source kept as written; a used return value becomes ``fn.distributed(*args)[0]`` (``AM202``);
* the distributor's assignment goes once none of its uses is left (``AM205``), and so does the ``TorchDistributor``
  import, replaced by ``from databricks.air import distributed`` where that import is in effect for the function
  (``AM204``); comments above a statement that goes move to the next one, the comments inside a distributor that
  goes (``num_processes=8,  # one per GPU``) move above the new decorator, which now holds those settings, and those
  of an import that goes or is replaced move above the line that takes its place: no comment is lost.

Everything the planner cannot rewrite is reported with its own code (``AM206`` to ``AM216``) and left as written;
``AM217`` reports Spark session setup.

Safety: the decorator, the run and the removals are safe (the same function runs on the same number and kind of
devices, with the same arguments, and no time limit). Three changes are flagged ``review``: a used return value
(``run`` returned rank 0's value, ``.distributed()`` returns every rank's, so ``[0]`` keeps the value but a person
should check the code that uses it), ``use_gpu=False`` (CPU ranks are an extension of this open runtime; Databricks
runs GPUs), and ``timeout=None`` (the old behaviour, but a cap is usually wanted; each call is also an MLflow run of
its own now).
"""

from __future__ import annotations

import dataclasses
from typing import Collection, Dict, List, Optional, Sequence, Set, Union

import libcst
from libcst.metadata import ParentNodeProvider, PositionProvider, ScopeProvider

from air_migrate.rule_base import STATEMENTS, CellContext, FileScan, Finding, Rule, Severity, register
from air_migrate.rules.torch_distributor.codes import (
    CPU,
    DESCRIPTIONS,
    IMPORT,
    NO_TIME_LIMIT,
    RANK_ZERO,
    RUN,
    VARIABLE,
)
from air_migrate.rules.torch_distributor.comments import comment_lines, comments_in
from air_migrate.rules.torch_distributor.facts import FileFacts
from air_migrate.rules.torch_distributor.file_scan import (
    RELEVANT,
    RESTARTS,
    may_read_python_names,
    scan_torch_distributor,
)
from air_migrate.rules.torch_distributor.plan import ImportEdit, Plan, plan_file
from air_migrate.rules.torch_distributor.survey import survey_cell
from air_migrate.sources import SourceFile

_FACTS = "torch_distributor.facts"
_PLAN = "torch_distributor.plan"
_LEFT = Union[libcst.CSTNode, libcst.RemovalSentinel, libcst.FlattenSentinel]
_STATEMENT_LEFT = Union[libcst.BaseStatement, libcst.FlattenSentinel[libcst.BaseStatement], libcst.RemovalSentinel]


@register
class TorchDistributorRule(Rule):
    CODE = RUN
    DESCRIPTION = (
        "TorchDistributor(...).run(fn, ...) becomes @distributed(num_accelerators=N, timeout=None) on fn and "
        "fn.distributed(...), across notebook cells; the distributor and its import go (safe; a used return value, "
        "use_gpu=False and timeout=None flagged for review)"
    )
    REPORTS = DESCRIPTIONS
    METADATA_DEPENDENCIES = (PositionProvider, ScopeProvider, ParentNodeProvider)

    def __init__(self, context: Optional[CellContext] = None) -> None:
        super().__init__(context)
        self._plan: Optional[Plan] = None
        self._carry: Dict[libcst.CSTNode, _Carried] = {}
        """Leading lines of removed statements, by their block, waiting for the next statement of that block."""
        self._kept: Set[libcst.CSTNode] = set()
        """The blocks where a statement was kept: a statement removed after that is not the block's first."""

    @classmethod
    def scan_file(cls, source: SourceFile) -> Optional[FileScan]:
        return scan_torch_distributor(source)

    # --- before any cell changes ---------------------------------------------------------------------------------

    def survey(self, module: libcst.Module) -> None:
        file = self.context.file
        if RESTARTS not in file:
            return  # the file never mentions TorchDistributor
        facts = file.get(_FACTS)
        if facts is None:
            facts = file[_FACTS] = FileFacts(
                restarts=file[RESTARTS], unparsed=may_read_python_names(self.context.unparsed)
            )
        text = self.context.text or module.code
        own_text = text.split("\n", self.context.prefix_lines)[-1] if self.context.prefix_lines else text
        if file[RELEVANT].search(own_text):  # else the cell reads and binds none of the names that matter
            survey_cell(self, module, facts)

    def visit_Module(self, node: libcst.Module) -> None:
        file = self.context.file
        facts = file.get(_FACTS)
        if facts is not None and _PLAN not in file:
            file[_PLAN] = plan_file(facts)  # once every cell is surveyed, before the first one changes
        self._plan = file.get(_PLAN)

    def statement_words(self) -> Optional[Collection[str]]:
        return None if RESTARTS in self.context.file else ()  # no TorchDistributor in the file: nothing to do

    # --- one traversal: notes where they are found, edits where they apply ---------------------------------------

    def on_visit(self, node: libcst.CSTNode) -> bool:
        wanted = super().on_visit(node)
        if self._plan is not None:
            for note in self._plan.notes.get(node, ()):
                self.report(node, note.message, severity=note.severity, code=note.code)
            functions = self._plan.cpu.get(node)  # type: ignore[call-overload]
            if functions is not None:
                assert isinstance(node, libcst.Arg)
                self._add(
                    node,
                    CPU,
                    f'use_gpu=False -> accelerator_type="CPU" on the decorator of {functions}: CPU '
                    "ranks (over gloo) are an extension of this open runtime; on Databricks, drop it to run "
                    "on the GPUs",
                    _source(self.module, node.with_changes(comma=libcst.MaybeSentinel.DEFAULT)),
                    'accelerator_type="CPU"',
                    severity=Severity.REVIEW,
                )
        return wanted

    def on_leave(  # type: ignore[override]  # (libcst types it as giving the node's own type: leave_* may not)
        self, original_node: libcst.CSTNode, updated_node: libcst.CSTNode
    ) -> _LEFT:
        result = super().on_leave(original_node, updated_node)
        if isinstance(original_node, STATEMENTS) and not isinstance(result, libcst.RemovalSentinel):
            self._kept.add(self.ancestors[-2])
            if self._carry:
                result = self._with_carried_lines(result)
        return result

    def leave_Call(self, original_node: libcst.Call, updated_node: libcst.Call) -> libcst.BaseExpression:
        edit = self._plan.runs.get(original_node) if self._plan is not None else None
        if edit is None:
            return updated_node
        rest = updated_node.args[1:]
        call = updated_node.with_changes(
            func=libcst.Attribute(libcst.Name(edit.function), libcst.Name("distributed")),
            args=rest,
            whitespace_before_args=_whitespace_before_rest(updated_node),
        )
        old = f"{edit.receiver}.run({edit.function}{', ...' if rest else ''})"
        new = f"{edit.function}.distributed({'...' if rest else ''})"
        if not edit.rank_zero:
            self.report(original_node, f"{old} -> {new}", after=call)
            return call
        indexed = libcst.Subscript(
            call.with_changes(lpar=(), rpar=()),
            [libcst.SubscriptElement(libcst.Index(libcst.Integer("0")))],
            lpar=call.lpar,
            rpar=call.rpar,
        )
        self.report(
            original_node,
            f"{old} -> {new}[0]: run returned rank 0's value, .distributed() returns every "
            "rank's in rank order, so [0] keeps it; check the code that uses it",
            severity=Severity.REVIEW,
            code=RANK_ZERO,
            after=indexed,
        )
        return indexed

    def leave_FunctionDef(self, original_node: libcst.FunctionDef, updated_node: libcst.FunctionDef) -> _STATEMENT_LEFT:
        decorator = self._plan.decorators.get(original_node) if self._plan is not None else None
        if decorator is None:
            return updated_node
        first = original_node.decorators[0] if original_node.decorators else original_node
        name = original_node.name.value
        comments = self._plan.comments.get(original_node, []) if self._plan is not None else []
        moved = "".join(f"{comment}\n" for comment in comments)
        self._add(
            first,
            RUN,
            f"@{decorator} added to {name}, which TorchDistributor ran"
            + (", below the comments of the TorchDistributor(...) it replaces" if comments else ""),
            "",
            f"{moved}@{decorator}",
            at_start=True,
        )
        self._add(
            first,
            NO_TIME_LIMIT,
            f"timeout=None keeps TorchDistributor.run's behaviour: no time limit. Without "
            f"it, @distributed stops a call after 3 hours (timeout=10800 s) and raises "
            f"LocalExecutionTimeoutError; to cap {name}, write timeout=SECONDS, the longest run you expect with "
            f"a margin",
            None,
            None,
            severity=Severity.REVIEW,
            at_start=True,
        )
        new = libcst.Decorator(libcst.parse_expression(decorator), leading_lines=comment_lines(comments))
        function = updated_node.with_changes(decorators=[new, *updated_node.decorators])
        statement = self._plan.before.get(original_node) if self._plan is not None else None
        if statement is None:
            return function
        self._add(
            first,
            IMPORT,
            f"{statement} added above {original_node.name.value}, for its decorator",
            "",
            statement,
            at_start=True,
        )
        new_import = libcst.parse_statement(statement + "\n")
        if self._follows_import(original_node):  # it joins those imports, the function keeps its spacing
            return libcst.FlattenSentinel([new_import, function])
        blank, rest = _split_blank_lines(function.leading_lines)
        spacing = blank or [libcst.EmptyLine()] * (2 if isinstance(self.ancestors[-2], libcst.Module) else 1)
        return libcst.FlattenSentinel(
            [new_import.with_changes(leading_lines=blank), function.with_changes(leading_lines=[*spacing, *rest])]
        )

    def leave_Import(self, original_node: libcst.Import, updated_node: libcst.Import) -> libcst.BaseSmallStatement:
        return self._edit_import(original_node, updated_node)

    def leave_ImportFrom(
        self, original_node: libcst.ImportFrom, updated_node: libcst.ImportFrom
    ) -> libcst.BaseSmallStatement:
        return self._edit_import(original_node, updated_node)

    def leave_SimpleStatementLine(
        self, original_node: libcst.SimpleStatementLine, updated_node: libcst.SimpleStatementLine
    ) -> _STATEMENT_LEFT:
        if self._plan is None:
            return updated_node
        gone = [index for index, small in enumerate(original_node.body) if self._goes(small)]
        added = [
            edit.add_after
            for small in original_node.body
            for edit in [self._plan.imports.get(small)]
            if edit is not None and edit.add_after
        ]
        for index in gone:
            self._report_removal(original_node.body[index])
        if len(gone) == len(original_node.body):
            return self._remove_statement(original_node)
        if gone:
            kept = [small for index, small in enumerate(updated_node.body) if index not in gone]
            kept[-1] = kept[-1].with_changes(semicolon=original_node.body[-1].semicolon)
            updated_node = updated_node.with_changes(body=kept)
        lost = self._comments_lost(original_node, gone)
        if lost:  # they go above the line that stays
            updated_node = updated_node.with_changes(leading_lines=[*updated_node.leading_lines, *comment_lines(lost)])
        if not added:
            return updated_node
        return libcst.FlattenSentinel([updated_node, *(libcst.parse_statement(text + "\n") for text in added)])

    def leave_IndentedBlock(
        self, original_node: libcst.IndentedBlock, updated_node: libcst.IndentedBlock
    ) -> libcst.IndentedBlock:
        carried = self._carry.pop(original_node, _Carried(False)).comments()
        if updated_node.body:
            return updated_node.with_changes(footer=[*carried, *updated_node.footer]) if carried else updated_node
        # Every statement of the block went: `pass` keeps it a block (and holds the comments that moved).
        return updated_node.with_changes(body=[libcst.SimpleStatementLine([libcst.Pass()], leading_lines=carried)])

    def leave_Module(self, original_node: libcst.Module, updated_node: libcst.Module) -> libcst.Module:
        carried = self._carry.pop(original_node, _Carried(False)).comments()
        if carried:
            updated_node = updated_node.with_changes(footer=[*carried, *updated_node.footer])
        if len(updated_node.body) <= len(self.context.prefix) < len(original_node.body):
            # Every statement of the cell went: the earlier cells' imports put before it keep their line endings.
            updated_node = updated_node.with_changes(has_trailing_newline=True)
        return updated_node

    # --- helpers -------------------------------------------------------------------------------------------------

    def _follows_import(self, function: libcst.FunctionDef) -> bool:
        """The statement just before ``function``, in its block and in this cell, is an import statement."""
        block = self.ancestors[-2]
        body = list(getattr(block, "body", ()))
        index = next((i for i, statement in enumerate(body) if statement is function), 0)
        first_own = len(self.context.prefix) if isinstance(block, libcst.Module) else 0
        if index <= first_own:
            return False
        previous = body[index - 1]
        return isinstance(previous, libcst.SimpleStatementLine) and all(
            isinstance(small, (libcst.Import, libcst.ImportFrom)) for small in previous.body
        )

    def _goes(self, small: libcst.BaseSmallStatement) -> bool:
        """A small statement that is taken out whole: a distributor's assignment, or an import nothing needs."""
        assert self._plan is not None
        if small in self._plan.removed:
            return True
        edit = self._plan.imports.get(small)
        return edit is not None and len(edit.drop) == len(_aliases(small)) and edit.replacement is None

    def _report_removal(self, small: libcst.BaseSmallStatement) -> None:
        assert self._plan is not None
        name = self._plan.removed.get(small)  # type: ignore[call-overload]
        if name is not None:
            self.report(
                small,
                f"{name} = TorchDistributor(...) removed: every run of {name} was rewritten",
                code=VARIABLE,
                after="",
            )
        else:
            self.report(small, "import removed: nothing uses TorchDistributor any more", code=IMPORT, after="")

    def _comments_lost(self, original: libcst.SimpleStatementLine, gone: Sequence[int]) -> List[str]:
        """The comments inside what goes from a line that stays: an import taken out or replaced, or the names
        dropped from one (a distributor's assignment takes its comments above the new decorator: :mod:`plan`)."""
        assert self._plan is not None
        lost: List[str] = []
        for index, small in enumerate(original.body):
            edit = self._plan.imports.get(small)
            if index in gone and small not in self._plan.removed or edit is not None and edit.replacement:
                lost += comments_in(small)
            elif edit is not None and edit.drop:
                lost += comments_in(*edit.drop)
        return lost

    def _remove_statement(self, original: libcst.SimpleStatementLine) -> libcst.RemovalSentinel:
        """Take the statement out; the lines above it (comments, spacing) go to the next statement of its block, and
        so do the comments of an import that goes (a distributor's go above the new decorator: :mod:`plan`)."""
        block = self.ancestors[-2]
        carried = self._carry.setdefault(block, _Carried(first=block not in self._kept))
        leading = list(original.leading_lines)
        if carried.first and carried.removed:  # the block's own spacing is its first statement's, already carried
            leading = _split_blank_lines(leading)[1]
        carried.lines.extend(leading)
        carried.removed += 1
        assert self._plan is not None
        if not any(small in self._plan.removed for small in original.body):
            carried.lines.extend(comment_lines(comments_in(*original.body, original.trailing_whitespace)))
        return libcst.RemoveFromParent()

    def _with_carried_lines(self, result: Union[libcst.CSTNode, libcst.FlattenSentinel]) -> _LEFT:
        carried = self._carry.pop(self.ancestors[-2], None)
        if carried is None:
            return result
        nodes = list(result.nodes) if isinstance(result, libcst.FlattenSentinel) else [result]
        first = nodes[0]
        own = list(first.leading_lines)  # type: ignore[union-attr]
        if carried.first:
            lines = [*carried.lines, *_split_blank_lines(own)[1]]  # the block's own spacing replaces this one's
        elif carried.comments() or not own or own[0].comment is not None:
            lines = [*carried.lines, *own]  # comments stay; so does the spacing of a statement that had none
        else:
            lines = own
        nodes[0] = first.with_changes(leading_lines=lines)
        return libcst.FlattenSentinel(nodes) if isinstance(result, libcst.FlattenSentinel) else nodes[0]

    def _edit_import(
        self, original: Union[libcst.Import, libcst.ImportFrom], updated: Union[libcst.Import, libcst.ImportFrom]
    ) -> libcst.BaseSmallStatement:
        edit = self._plan.imports.get(original) if self._plan is not None else None
        if edit is None:
            return updated
        new: libcst.BaseSmallStatement = updated
        if edit.drop and edit.replacement is not None:
            replaced = libcst.parse_statement(edit.replacement + "\n")
            assert isinstance(replaced, libcst.SimpleStatementLine)
            new = replaced.body[0].with_changes(semicolon=updated.semicolon)
            before = _source(self.module, original.with_changes(semicolon=libcst.MaybeSentinel.DEFAULT))
            self._add(original, IMPORT, f"{before} -> {edit.replacement}", before, edit.replacement)
            return new
        if edit.drop and len(edit.drop) < len(_aliases(original)):
            dropped = [index for index, alias in enumerate(_aliases(original)) if alias in edit.drop]
            new = updated.with_changes(names=_without(list(_aliases(updated)), dropped))
            shown = ", ".join(self.module.code_for_node(_aliases(original)[index].name) for index in dropped)
            self.report(original, f"{shown} removed from the import: nothing uses it any more", code=IMPORT, after=new)
        if edit.add_name is not None and isinstance(new, libcst.ImportFrom):
            new = new.with_changes(names=_with_name(list(_aliases(new)), edit.add_name))
            self.report(original, f"{edit.add_name} added to the import, for @{edit.add_name}", code=IMPORT, after=new)
        if edit.add_after is not None:
            self._add(original, IMPORT, f"{edit.add_after} added after this import", "", edit.add_after)
        return new

    def _add(
        self,
        node: libcst.CSTNode,
        code: str,
        message: str,
        before: Optional[str],
        after: Optional[str],
        severity: Severity = Severity.CHANGE,
        at_start: bool = False,
    ) -> None:
        """Report a change whose before/after is not the node's own source (an insertion, or part of a node); with
        neither, a word about a change reported on its own."""
        where = self.get_metadata(PositionProvider, node)
        end = where.start if at_start else where.end
        self.findings.append(
            Finding(
                code=code,
                line=where.start.line,
                column=where.start.column + 1,
                message=message,
                severity=severity,
                end_line=end.line,
                end_column=end.column + 1,
                before=before,
                after=after,
            )
        )


@dataclasses.dataclass
class _Carried:
    """The leading lines of removed statements, waiting for the next statement of their block."""

    first: bool
    """The first of them was the block's first statement."""
    lines: List[libcst.EmptyLine] = dataclasses.field(default_factory=list)
    removed: int = 0
    """How many statements they come from."""

    def comments(self) -> List[libcst.EmptyLine]:
        """What must not be lost when no statement follows: the lines, if any holds a comment."""
        return self.lines if any(line.comment is not None for line in self.lines) else []


def _source(module: libcst.Module, node: libcst.CSTNode) -> str:
    """A node's source on its own (without the comma or semicolon that joins it to the next)."""
    return module.code_for_node(node).strip()


def _aliases(node: libcst.CSTNode) -> Sequence[libcst.ImportAlias]:
    names = getattr(node, "names", ())
    return () if isinstance(names, libcst.ImportStar) else names


def _without(names: List[libcst.ImportAlias], dropped: Sequence[int]) -> List[libcst.ImportAlias]:
    """``names`` less some, the last one kept taking the comma of the last one when that one goes."""
    kept = [alias for index, alias in enumerate(names) if index not in dropped]
    if len(names) - 1 in dropped:
        kept[-1] = kept[-1].with_changes(comma=names[-1].comma)
    return kept


def _with_name(names: List[libcst.ImportAlias], name: str) -> List[libcst.ImportAlias]:
    """``names`` and ``name`` after the last one (which takes a comma; the new one takes its old one)."""
    last = names[-1]
    comma = libcst.Comma(whitespace_after=libcst.SimpleWhitespace(" "))
    return [*names[:-1], last.with_changes(comma=comma), libcst.ImportAlias(libcst.Name(name), comma=last.comma)]


def _whitespace_before_rest(call: libcst.Call) -> libcst.BaseParenthesizableWhitespace:
    """What follows ``(`` once the function argument is gone: a comment after its comma moves up, not away (below
    a comment that follows ``(``, when there is one too)."""
    first = call.args[0]
    if not isinstance(first.comma, libcst.Comma) or not _has_comment(first.comma.whitespace_after):
        return call.whitespace_before_args
    after = first.comma.whitespace_after
    before = call.whitespace_before_args
    if not _has_comment(before):
        return after
    assert isinstance(before, libcst.ParenthesizedWhitespace) and isinstance(after, libcst.ParenthesizedWhitespace)
    moved = libcst.EmptyLine(
        indent=after.indent,
        whitespace=after.last_line,
        comment=after.first_line.comment,
        newline=after.first_line.newline,
    )
    return before.with_changes(
        empty_lines=[*before.empty_lines, moved, *after.empty_lines], indent=after.indent, last_line=after.last_line
    )


def _has_comment(whitespace: libcst.BaseParenthesizableWhitespace) -> bool:
    if not isinstance(whitespace, libcst.ParenthesizedWhitespace):
        return False
    lines = [whitespace.first_line, *whitespace.empty_lines]
    return any(getattr(line, "comment", None) is not None for line in lines)


def _split_blank_lines(lines: Sequence[libcst.EmptyLine]) -> "tuple[list, list]":
    """The blank lines before the first comment, and the rest."""
    index = next((i for i, line in enumerate(lines) if line.comment is not None), len(lines))
    return list(lines[:index]), list(lines[index:])


__all__ = ["TorchDistributorRule", "ImportEdit"]
