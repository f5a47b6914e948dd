"""Running the selected rules over one cell: one traversal, one set of metadata, positions of the input text.

Each rule gets a fresh instance per cell. All of them see the cell as it was read: metadata (positions, scopes,
qualified names) is computed once, on the original nodes, and every rule reports at original nodes, so a column
never shifts because another rule renamed something before it on the line. Changes are chained in code order: at
each node, a rule's ``leave_*`` receives the node as the rules before it left it (a rule that replaces a node by
one of another kind, or removes it, ends the chain for that node).

Before any cell of a file is transformed, every rule surveys every cell (:meth:`PreparedCell.survey`), which is how
a rule learns what other cells hold (e.g. whether a name is still used anywhere in a notebook).

A cell is parsed in part where it can be (:func:`prepare_cell`, :mod:`air_migrate.partial_parse`): only its
top-level statements that hold a word a rule asks for, and the earlier cells' imports that do.

The statements of the cell's prefix (earlier cells' imports, put first so that names resolve across cells) are
neither visited nor changed. With ``todo_comments``, each statement holding an item for a person gets a marker
comment (:mod:`air_migrate.todo_markers`), and without it each such statement that a rule changed does;
:meth:`PreparedCell.markers_only` gives the cell as read with only those markers, for a file whose changes are held
back.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import functools
import re
from typing import Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Type, Union, cast

import libcst
from libcst.metadata import (
    CodePosition,
    CodeRange,
    ExpressionContextProvider,
    MetadataWrapper,
    ParentNodeProvider,
    PositionProvider,
    ProviderT,
    ScopeProvider,
)
from libcst.metadata.position_provider import PositionProvidingCodegenState

from air_migrate.cell_context import PrefixImport, prefix_of
from air_migrate.partial_parse import PartialParse, RawStatement, changed_statements, parse_partly
from air_migrate.rule_base import STATEMENTS, CellContext, Finding, Rule
from air_migrate.statements import split_statements
from air_migrate.todo_markers import MarkerInserter, add_markers


_CHECKED_WHOLE = 64 * 1024
"""Characters of a cell's new text up to which it is checked whole (Python's parser takes a fraction of a
millisecond per kilobyte); a longer cell parsed in part has only its changed statements checked."""


@dataclasses.dataclass
class CellOutcome:
    """What running the rules over a cell gave."""

    module: libcst.Module
    """The cell transformed (prefix included)."""
    findings: List[Finding]
    """In the order the rules reported them; positions in the parsed text (prefix included)."""
    marks: Dict[libcst.CSTNode, List[Finding]]
    """Original statement -> the findings for a person inside it (what gets a TODO marker)."""
    lasting: Dict[libcst.CSTNode, List[Finding]] = dataclasses.field(default_factory=dict)
    """Statement of :attr:`module` (unchanged, unmarked) -> its items whose reason a write of the file takes away
    (:attr:`~air_migrate.rule_base.Finding.lasting`): marked when the file changes (:meth:`PreparedCell.mark`)."""
    changed: bool = True
    """A rule changed something, or a marker was added: else :attr:`module` prints as the cell was read. (Every
    change is reported: a rule that rewrites a node says so.)"""


def prepare_cell(
    text: str,
    prefix: Sequence[PrefixImport],
    rule_types: Sequence[Type[Rule]],
    context: CellContext,
    newline: str = "",
) -> "PreparedCell":
    """The cell ``text`` parsed after the earlier cells' imports ``prefix``, ready for the rules: in part where it
    can be (the statements the rules ask for), else whole. ``context`` gives the cell's number, the file's scratch,
    kind and unparsed code; its prefix and text are set here. Raises :class:`libcst.ParserSyntaxError` (from the
    parse of the whole text, so that the error is the one the cell has) when the cell does not parse."""
    chunks = split_statements(text)
    if chunks is not None:

        def words_for(parsed: str) -> Optional[FrozenSet[str]]:
            seen = dataclasses.replace(context, text=parsed)
            return _words([rule_type(seen) for rule_type in rule_types])

        try:
            partial = parse_partly([found.text for found in prefix], chunks, words_for)
        except libcst.ParserSyntaxError:
            partial = None  # the whole text's parse says where and why
        if partial is not None:
            kept, statements = prefix_of([prefix[index] for index in partial.prefix_kept])
            cell_context = dataclasses.replace(
                context, prefix_lines=kept.count("\n"), prefix=statements, text=partial.text
            )
            return PreparedCell(partial.module, rule_types, cell_context, newline, kept, partial)
    kept, statements = prefix_of(prefix)
    module = libcst.parse_module(kept + text)
    cell_context = dataclasses.replace(context, prefix_lines=kept.count("\n"), prefix=statements, text=kept + text)
    return PreparedCell(module, rule_types, cell_context, newline, kept)


class PreparedCell:
    """A parsed cell with its rules instantiated and their metadata at hand (each provider computed on first use),
    ready to be surveyed and run."""

    def __init__(
        self,
        module: libcst.Module,
        rule_types: Sequence[Type[Rule]],
        context: Optional[CellContext] = None,
        newline: str = "",
        prefix: Optional[str] = None,
        partial: Optional[PartialParse] = None,
    ) -> None:
        self.module = module
        self.context = context if context is not None else CellContext()
        self.newline = newline
        """The cell's own line ending when it differs from the parsed text's default (for inserted lines)."""
        self.partial = partial
        """How the cell was parsed in part (``None``: whole)."""
        self.prefix = (
            prefix
            if prefix is not None
            else "".join(module.code_for_node(s) for s in module.body[: len(self.context.prefix)])
        )
        """The text of the prefix's statements, which starts the module's code."""
        self.rules = [rule_type(self.context) for rule_type in rule_types]
        self.findings: List[Finding] = []
        """What every rule reported, in report order (one channel for all)."""
        self.ancestors: List[libcst.CSTNode] = []
        self.skipped: FrozenSet[libcst.CSTNode] = frozenset(module.body[: len(self.context.prefix)])
        """The prefix's statements, and the cell's top-level statements that hold no word a rule asks for
        (:meth:`Rule.statement_words`): never traversed, never changed."""
        providers: List[ProviderT] = []
        for rule in self.rules:
            rule.findings = self.findings
            rule.ancestors = self.ancestors
            rule.module = module
            providers.extend(p for p in rule.get_inherited_dependencies() if p not in providers)
        self.codes = StatementCodes(module, partial.codes if partial is not None else {})
        """The code of the module's statements, each printed at most once."""
        for rule in self.rules:
            rule.statement_codes = self.codes
        self._wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # the module is ours: no copy needed
        asked = [rule.statement_words() for rule in self.rules]
        self.words = None if any(words is None for words in asked) else frozenset().union(*asked)  # type: ignore
        """What the rules ask a top-level statement to hold (``None``: every statement is traversed)."""
        self._quiet: Dict[libcst.CSTNode, bool] = {}
        self.traversing = [rule for rule, words in zip(self.rules, asked) if words is None or words]
        """The rules that may change or report something in some statement of the cell: one that asks for no word
        (``TorchDistributor``'s rules in a file without it) has nothing to do in the traversal."""
        own = module.body[len(self.context.prefix) :]
        if partial is not None:  # what was parsed holds those words; the rest is text
            self.skipped = self.skipped | {s for s in own if isinstance(s, RawStatement)}
        elif self.words is not None:
            self.skipped = self.skipped | {s for s in own if not _holds_any(self.codes, s, self.words)}
        positions = _StatementPositions(module, self.ancestors, self._wrapper, self.codes)
        metadata = _LazyMetadata(self._wrapper, providers, self._scopes, positions)
        for rule in self.rules:
            rule.metadata = metadata

    def _scopes(self) -> Mapping:
        """``ScopeProvider``'s metadata, computed over the statements that are traversed (and the prefix) only, the
        nested ones too: every binding and every read of a word a rule asks for spells that word, so it lies in a
        statement that is kept, and what those names resolve to is the same as over the whole cell, at a fraction
        of the cost (a decorated function's body is most of a cell, and rarely names anything a rule asks about).
        The nodes rebuilt to leave statements out (a function whose body is shortened, its blocks, the module) are
        looked up as the originals they stand for."""
        module = self.module
        if self.words is None:
            return _resolve_scopes(module)
        replaced: Dict[libcst.CSTNode, libcst.CSTNode] = {}
        body: List[libcst.CSTNode] = list(module.body[: len(self.context.prefix)])
        for statement in module.body[len(self.context.prefix) :]:
            if statement not in self.skipped:  # (a statement left as text holds none of the words either)
                body.append(_pruned(statement, self.holds, replaced))
        if not replaced and len(body) == len(module.body):
            return _resolve_scopes(module)
        pruned = module.with_changes(body=body)
        replaced[module] = pruned
        return _Translated(_resolve_scopes(pruned), replaced)

    def holds(self, statement: libcst.CSTNode, parent: Optional[libcst.CSTNode] = None) -> bool:
        """``statement`` (of the body of ``parent``, when given) holds a word a rule asks for."""
        assert self.words is not None
        if parent is not None and self._quiet_body(parent):
            return False
        return _holds_any(self.codes, statement, self.words)

    def _quiet_body(self, compound: libcst.CSTNode) -> bool:
        """No statement of the body of ``compound``, a ``def`` or ``class``, holds a word: every word its code holds
        is in its decorators and signature (a decorated training function, whose body names nothing a rule asks
        about). Found by counting the words in its code and in its code with ``pass`` for a body, so the body's
        statements need not be printed one by one to be passed over."""
        if not isinstance(compound, (libcst.FunctionDef, libcst.ClassDef)) or not isinstance(
            compound.body, libcst.IndentedBlock
        ):
            return False
        found = self._quiet.get(compound)
        if found is None:
            shell = compound.with_changes(body=compound.body.with_changes(body=[_PASS], footer=()))
            found = self._quiet[compound] = _count(self.codes[compound], self.words) == _count(  # type: ignore
                self.module.code_for_node(shell),
                self.words,  # type: ignore[arg-type]
            ) - _count("pass", self.words)  # type: ignore
        return found

    def survey(self) -> None:
        """Let every rule look at the cell before any cell of the file is changed."""
        for rule in self.rules:
            rule.survey(self.module)

    def run(self, todo_comments: bool = False, suppressed: Optional[Callable[[Finding], bool]] = None) -> CellOutcome:
        """Transform the cell with every rule in one traversal; an item for a person that ``suppressed`` says a
        suppression comment hides gets no TODO marker."""
        traversal = _Traversal(self, todo_comments, suppressed)
        module = self.module.visit(traversal)
        changed = traversal.marked or any(finding.severity.rewritten for finding in self.findings)
        return CellOutcome(module, list(self.findings), traversal.marks, traversal.lasting, changed)

    def mark_lasting(self, outcome: CellOutcome) -> libcst.Module:
        """The transformed cell with the markers of its lasting items too, for a file that changes."""
        if not outcome.lasting:
            return outcome.module
        return outcome.module.visit(MarkerInserter(outcome.lasting, self.newline))

    def markers_only(self, marks: Dict[libcst.CSTNode, List[Finding]]) -> libcst.Module:
        """The cell as read, with only the TODO markers of ``marks`` added."""
        return self.module.visit(MarkerInserter(marks, self.newline))

    def new_text(self, module: libcst.Module, before: str, changed: bool = True) -> Optional[str]:
        """The cell's text in ``module`` (this cell transformed; ``before`` is its text as read), or ``None`` when
        it would not parse (a rule's bug: never write it). ``changed=False``: no rule changed anything (the module
        is not printed again). The new text is checked with Python's own parser: whole, or, for a long cell parsed
        in part, only the statements that are not as read."""
        if not changed:
            return before
        code = module.code
        if not code.startswith(self.prefix):
            return None
        text = code[len(self.prefix) :]
        if text == before:
            return text
        long = self.partial is not None and len(text) > _CHECKED_WHOLE
        check = changed_statements(module, self.partial.originals) if long else text  # type: ignore[union-attr]
        try:
            ast.parse(check)
        except (SyntaxError, ValueError):
            return None
        return text


class _LazyMetadata(Mapping):
    """The rules' metadata, each provider computed the first time a rule asks for it (scopes and qualified names
    cost more than parsing: a cell where no rule needs them never pays for them)."""

    def __init__(
        self,
        wrapper: MetadataWrapper,
        providers: Sequence[ProviderT],
        scopes: Callable[[], Mapping],
        positions: "_StatementPositions",
    ) -> None:
        self._wrapper = wrapper
        self._scopes = scopes
        self._scope_mapping: Optional[Mapping] = None
        self._parents: Optional[Dict[libcst.CSTNode, libcst.CSTNode]] = None
        self._positions = positions
        self._providers = tuple(providers)

    def __getitem__(self, provider: ProviderT) -> Mapping:
        if provider not in self._providers:
            raise KeyError(provider)
        if provider is PositionProvider:
            return self._positions
        if provider is ScopeProvider:
            if self._scope_mapping is None:
                self._scope_mapping = self._scopes()
            return self._scope_mapping
        if provider is ParentNodeProvider:
            if self._parents is None:
                finder = _Parents()
                self._wrapper.module.visit(finder)
                self._parents = finder.parents
            return self._parents
        return self._wrapper.resolve(provider)

    def __contains__(self, provider: object) -> bool:
        return provider in self._providers

    def __iter__(self) -> Iterator[ProviderT]:
        return iter(self._providers)

    def __len__(self) -> int:
        return len(self._providers)


def _resolve_scopes(module: libcst.Module) -> Mapping:
    """What ``MetadataWrapper(module).resolve(ScopeProvider)`` gives, at a third of the cost: libcst's two providers
    (expression contexts, then scopes) each do their work in one traversal of their own when they meet the module,
    so they are run that way, without the batched traversal around them (which visits every node once more per
    provider, to do nothing) nor the copy of what they computed."""
    wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
    contexts = ExpressionContextProvider()
    with contexts.resolve(wrapper):
        contexts.visit_Module(module)
    wrapper._metadata[ExpressionContextProvider] = contexts._computed  # what ScopeProvider reads
    scopes = ScopeProvider()
    with scopes.resolve(wrapper):
        scopes.visit_Module(module)
    return scopes._computed


def _positions(module: libcst.Module) -> Mapping:
    """What ``MetadataWrapper(module).resolve(PositionProvider)`` gives: one code generation that records where each
    node is (the wrapper would also walk the whole module once more in a batched traversal with no visitor in it)."""
    return PositionProvider()._gen(MetadataWrapper(module, unsafe_skip_copy=True))


class _Parents(libcst.CSTVisitor):
    """What ``ParentNodeProvider`` gives (node -> its parent), in one plain traversal: libcst's own asks each node
    for its children (a traversal of each node) within a batched traversal, ten times the cost."""

    def __init__(self) -> None:
        super().__init__()
        self.parents: Dict[libcst.CSTNode, libcst.CSTNode] = {}
        self._stack: List[libcst.CSTNode] = []

    def on_visit(self, node: libcst.CSTNode) -> bool:
        if self._stack:
            self.parents[node] = self._stack[-1]
        self._stack.append(node)
        return True

    def on_leave(self, original_node: libcst.CSTNode) -> None:
        self._stack.pop()

    def on_visit_attribute(self, node: libcst.CSTNode, attribute: str) -> None:
        pass

    def on_leave_attribute(self, original_node: libcst.CSTNode, attribute: str) -> None:
        pass


_PARTS = ("body", "orelse", "handlers", "finalbody", "cases")
"""Where a compound statement (or a clause of one: ``else``, ``except``, ``finally``, ``case``) holds statements."""


def _pruned(
    node: libcst.CSTNode,
    holds: Callable[[libcst.CSTNode, libcst.CSTNode], bool],
    replaced: Dict[libcst.CSTNode, libcst.CSTNode],
) -> libcst.CSTNode:
    """``node`` without the nested statements that hold no word (``holds(statement, node)``; a block left empty
    holds ``pass``); ``replaced`` gains each node rebuilt, original -> new. ``node`` itself when nothing is left
    out."""
    changes: Dict[str, object] = {}
    for name in _PARTS:
        part = getattr(node, name, None)
        if isinstance(part, libcst.IndentedBlock):
            kept = [_pruned(statement, holds, replaced) for statement in part.body if holds(statement, node)]
            if len(kept) != len(part.body) or any(new is not old for new, old in zip(kept, part.body)):
                new_block = part.with_changes(body=kept or [libcst.SimpleStatementLine([libcst.Pass()])])
                replaced[part] = new_block
                changes[name] = new_block
        elif isinstance(part, (tuple, list)):
            items = [_pruned(item, holds, replaced) for item in part]
            if any(new is not old for new, old in zip(items, part)):
                changes[name] = items
        elif isinstance(part, libcst.CSTNode) and not isinstance(part, libcst.BaseSuite):
            new = _pruned(part, holds, replaced)  # an `elif`, an `else:`, a `finally:`
            if new is not part:
                changes[name] = new
    if not changes:
        return node
    new_node = node.with_changes(**changes)
    replaced[node] = new_node
    return new_node


class _Translated(Mapping):
    """Metadata computed over a module some of whose nodes were rebuilt, looked up by the original nodes too."""

    def __init__(self, mapping: Mapping, replaced: Mapping[libcst.CSTNode, libcst.CSTNode]) -> None:
        self._mapping = mapping
        self._replaced = replaced

    def __getitem__(self, node: libcst.CSTNode) -> object:
        return self._mapping[self._replaced.get(node, node)]

    def __contains__(self, node: object) -> bool:
        return self._replaced.get(node, node) in self._mapping  # type: ignore[call-overload]

    def __iter__(self) -> Iterator[libcst.CSTNode]:
        return iter(self._mapping)

    def __len__(self) -> int:
        return len(self._mapping)


def _words(rules: Sequence[Rule]) -> Optional[FrozenSet[str]]:
    """What the rules ask a top-level statement to hold (:meth:`Rule.statement_words`); ``None`` for all."""
    words: set = set()
    for rule in rules:
        asked = rule.statement_words()
        if asked is None:
            return None
        words.update(asked)
    return frozenset(words)


class _StatementPositions(Mapping):
    """``PositionProvider`` for a node inside the top-level statement being traversed (or for a top-level statement
    and the small statements of one, such as the imports a survey asks about), computed over that statement alone
    and shifted by the lines before it (a top-level statement starts at column 0); any other node gets the
    positions computed over the whole cell. A report rarely needs more than a few statements' positions,
    and the whole cell's cost as much as parsing it.

    Within a statement, positions are computed only as far as the decorator or line that holds the node asked for
    (most reports are in a decorator, above a long body); after a few such partial passes over one statement it is
    done whole."""

    _PARTIAL_PASSES = 2

    def __init__(
        self,
        module: libcst.Module,
        ancestors: List[libcst.CSTNode],
        wrapper: MetadataWrapper,
        codes: Mapping[libcst.CSTNode, str],
    ) -> None:
        self._module = module
        self._codes = codes
        self._ancestors = ancestors
        self._wrapper = wrapper
        self._starts: Optional[Dict[libcst.CSTNode, int]] = None
        self._owners: Optional[Dict[libcst.CSTNode, libcst.CSTNode]] = None
        self._computed: Dict[libcst.CSTNode, "_Shifted"] = {}
        self._whole: Optional[Mapping] = None

    def _local(self, node: libcst.CSTNode) -> Optional[Mapping]:
        if self._module.default_newline not in ("\n", "\r\n"):
            return None
        if self._owners is None:  # a top-level statement, or a small statement of one (an import, in a survey)
            self._owners = {each: each for each in self._module.body}
            for each in self._module.body:
                if isinstance(each, libcst.SimpleStatementLine):
                    self._owners.update((small, each) for small in each.body)
        statement = self._owners.get(node) or (self._ancestors[1] if len(self._ancestors) > 1 else None)
        if statement is None:
            return None
        found = self._computed.get(statement)
        if found is None:
            if self._starts is None:
                self._starts = {}
                line = len(self._module.header)
                for each in self._module.body:
                    self._starts[each] = line
                    line += self._codes[each].count("\n")
            if statement not in self._starts:
                return None
            found = self._computed[statement] = _Shifted({}, self._starts[statement])
        if node not in found and not found.complete:
            alone = self._module.with_changes(header=(), body=[statement], footer=())
            if (
                found.passes < self._PARTIAL_PASSES
                and _positions_until(alone, self._stop(node), found.positions)
                and node in found.positions
            ):
                found.passes += 1
            else:
                found.positions.update(_positions(alone))
                found.complete = True
        return found if node in found else None

    def _stop(self, node: libcst.CSTNode) -> libcst.CSTNode:
        """Where a partial pass for ``node`` stops: after the decorator or the line being traversed that holds it,
        so that one pass serves every report in it (``gpus=``, ``gpu_type=`` and the type of one decorator), else
        after ``node`` itself."""
        for index, ancestor in enumerate(self._ancestors[2:], start=2):
            if isinstance(ancestor, (libcst.Decorator, libcst.SimpleStatementLine)):
                above = any(each is node for each in self._ancestors[:index])
                return node if above else ancestor
        return node

    def _all(self) -> Mapping:
        if self._whole is None:
            self._whole = _positions(self._wrapper.module)
        return self._whole

    def __getitem__(self, node: libcst.CSTNode) -> CodeRange:
        local = self._local(node)
        return local[node] if local is not None else self._all()[node]

    def __contains__(self, node: object) -> bool:
        return (isinstance(node, libcst.CSTNode) and self._local(node) is not None) or node in self._all()

    def __iter__(self) -> Iterator[libcst.CSTNode]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


class _Shifted(Mapping):
    """Positions computed over one statement alone (all of them, or those up to some node), as lines of the whole
    cell."""

    def __init__(self, positions: Dict[libcst.CSTNode, CodeRange], lines: int) -> None:
        self.positions = positions
        self._lines = lines
        self.complete = False
        self.passes = 0

    def __getitem__(self, node: libcst.CSTNode) -> CodeRange:
        found = self.positions[node]
        return CodeRange(
            CodePosition(found.start.line + self._lines, found.start.column),
            CodePosition(found.end.line + self._lines, found.end.column),
        )

    def __contains__(self, node: object) -> bool:
        return node in self.positions

    def __iter__(self) -> Iterator[libcst.CSTNode]:
        return iter(self.positions)

    def __len__(self) -> int:
        return len(self.positions)


class _Reached(Exception):
    """The node whose position was asked for has been printed."""


class _StopAfter(PositionProvidingCodegenState):
    """libcst's position-recording code generation, stopped once ``target`` is printed."""

    target: Optional[libcst.CSTNode] = None

    def after_codegen(self, node: libcst.CSTNode) -> None:
        super().after_codegen(node)
        if node is self.target:
            raise _Reached

    @contextlib.contextmanager
    def record_syntactic_position(
        self,
        node: libcst.CSTNode,
        *,
        start_node: Optional[libcst.CSTNode] = None,
        end_node: Optional[libcst.CSTNode] = None,
    ) -> Iterator[None]:
        """libcst's own, except that stopping records nothing more (a node's end may be one not printed yet)."""
        start = CodePosition(self.line, self.column)
        yield
        end = CodePosition(self.line, self.column)
        computed = cast(Dict[libcst.CSTNode, CodeRange], self.provider._computed)  # (positions are never lazy)
        computed[node] = CodeRange(
            computed[start_node].start if start_node is not None else start,
            computed[end_node].end if end_node is not None else end,
        )


def _positions_until(module: libcst.Module, node: libcst.CSTNode, into: Dict[libcst.CSTNode, CodeRange]) -> bool:
    """Record into ``into`` the positions in ``module`` of every node printed up to and including ``node``; False
    when ``node`` is not in ``module`` (then nothing is left recorded that was not already)."""
    recorder = _Recorder()
    state = _StopAfter(default_indent=module.default_indent, default_newline=module.default_newline, provider=recorder)  # type: ignore[arg-type]  # (a stand-in: only its _computed is used)
    state.target = node
    try:
        module._codegen(state)
    except _Reached:
        into.update(recorder._computed)
        return True
    return False


class _Recorder:
    """What libcst's position-recording state writes into (a provider's ``_computed``)."""

    def __init__(self) -> None:
        self._computed: Dict[libcst.CSTNode, CodeRange] = {}


class StatementCodes(Mapping):
    """The code of each statement of a module as read (top-level or nested), printed the first time it is asked
    for; a partial parse gives the code of most top-level statements without printing anything."""

    def __init__(self, module: libcst.Module, known: Mapping[libcst.CSTNode, str]) -> None:
        self._module = module
        self._codes: Dict[libcst.CSTNode, str] = dict(known)

    def __getitem__(self, statement: libcst.CSTNode) -> str:
        code = self._codes.get(statement)
        if code is None:
            code = self._codes[statement] = self._module.code_for_node(statement)
        return code

    def __iter__(self) -> Iterator[libcst.CSTNode]:
        return iter(self._codes)

    def __len__(self) -> int:
        return len(self._codes)


def _holds_any(codes: Mapping[libcst.CSTNode, str], statement: libcst.CSTNode, words: FrozenSet[str]) -> bool:
    text = codes[statement]
    return any(word in text for word in words)


def _count(text: str, words: FrozenSet[str]) -> int:
    """How many times the words occur in ``text`` (no word spans a line end, so counts of lines add up)."""
    return sum(text.count(word) for word in words)


_PASS = libcst.SimpleStatementLine([libcst.Pass()])


_ATTRIBUTE_METHOD = re.compile(r"^(?:visit|leave)_[A-Z][A-Za-z]*_[a-z_]+$")


@functools.lru_cache(maxsize=None)
def _has_attribute_methods(kind: type) -> bool:
    return any(_ATTRIBUTE_METHOD.match(name) for name in dir(kind))


def _methods_for(rules: Sequence[Rule], kind: type, what: str) -> List[Callable[..., object]]:
    """The rules' methods for nodes of class ``kind``, in rule order: ``visit_<Node>`` (``what="visit"``) or
    ``leave_<Node>``, as libcst's own transformer calls them, or the rule's own ``on_visit``/``on_leave`` where it
    overrides it. The lookup is made once per rule class and node class, not at every node of every cell."""
    return [getattr(rules[index], name) for index, name in _method_names(tuple(map(type, rules)), kind, what)]


@functools.lru_cache(maxsize=None)
def _method_names(classes: "tuple[type, ...]", kind: type, what: str) -> "tuple[tuple[int, str], ...]":
    found = []
    for index, rule_class in enumerate(classes):
        if getattr(rule_class, f"on_{what}") is not getattr(libcst.CSTTransformer, f"on_{what}"):
            found.append((index, f"on_{what}"))
        elif hasattr(rule_class, f"{what}_{kind.__name__}"):
            found.append((index, f"{what}_{kind.__name__}"))
    return tuple(found)


class _Traversal(libcst.CSTTransformer):
    """Dispatches each node to every rule in turn, and claims findings for the statements that hold them."""

    def __init__(
        self, cell: PreparedCell, todo_comments: bool, suppressed: Optional[Callable[[Finding], bool]] = None
    ) -> None:
        super().__init__()
        self._suppressed = suppressed
        self._cell = cell
        self._rules = cell.traversing
        self._todo = todo_comments
        self._statement_starts: List[int] = []
        self._claimed: set = set()
        self._skipped = cell.skipped
        self._words = cell.words
        self._passed: set = set()  # nested statements not traversed
        self.marks: Dict[libcst.CSTNode, List[Finding]] = {}
        self.lasting: Dict[libcst.CSTNode, List[Finding]] = {}
        self.marked = False
        """A marker was added above a statement."""
        self._attributes = any(_has_attribute_methods(type(rule)) for rule in self._rules)
        """Some rule has a ``visit_<Node>_<attribute>`` method (none does: the calls per attribute are skipped)."""
        self._visits: Dict[type, List[Callable[[libcst.CSTNode], object]]] = {}
        self._leaves: Dict[type, List[Callable[[libcst.CSTNode, libcst.CSTNode], object]]] = {}
        """Per node class, the rules' methods for it, in rule order (most node classes have none)."""

    def on_visit(self, node: libcst.CSTNode) -> bool:
        if node in self._skipped:
            return False
        if isinstance(node, STATEMENTS):
            ancestors = self._cell.ancestors
            if (
                self._words is not None
                and len(ancestors) > 1
                and not self._cell.holds(
                    node, ancestors[-2] if isinstance(ancestors[-1], libcst.IndentedBlock) else None
                )
            ):  # a nested statement without a word is no rule's business either (the body of a decorated def)
                self._passed.add(node)
                return False
            self._statement_starts.append(len(self._cell.findings))
        self._cell.ancestors.append(node)
        visits = self._visits.get(type(node))
        if visits is None:
            visits = self._visits[type(node)] = _methods_for(self._rules, type(node), "visit")
        # Children are visited unless every rule declines them (a rule declining alone still sees them): a rule
        # without a visit_<Node> method wants them.
        return len(visits) < len(self._rules) or any([visit(node) is not False for visit in visits])

    def on_leave(  # type: ignore[override]  # (libcst types it as giving the node's own type: leave_* may not)
        self, original_node: libcst.CSTNode, updated_node: libcst.CSTNode
    ) -> Union[libcst.CSTNode, libcst.RemovalSentinel, libcst.FlattenSentinel]:
        if original_node in self._skipped or original_node in self._passed:
            return updated_node
        result: Union[libcst.CSTNode, libcst.RemovalSentinel, libcst.FlattenSentinel] = updated_node
        leaves = self._leaves.get(type(original_node))
        if leaves is None:
            leaves = self._leaves[type(original_node)] = _methods_for(self._rules, type(original_node), "leave")
        for leave in leaves:
            result = leave(original_node, result)  # type: ignore[arg-type, assignment]
            if type(result) is not type(original_node):
                break
        self._cell.ancestors.pop()
        if isinstance(original_node, STATEMENTS):
            result = self._claim(original_node, result)
        return result

    def on_visit_attribute(self, node: libcst.CSTNode, attribute: str) -> None:
        if self._attributes:
            for rule in self._rules:
                rule.on_visit_attribute(node, attribute)

    def on_leave_attribute(self, original_node: libcst.CSTNode, attribute: str) -> None:
        if self._attributes:
            for rule in self._rules:
                rule.on_leave_attribute(original_node, attribute)

    def _claim(self, original: libcst.CSTNode, result):
        """The innermost statement around an item for a person is the one its marker goes above."""
        start = self._statement_starts.pop()
        findings = [
            (index, finding)
            for index, finding in enumerate(self._cell.findings[start:], start=start)
            if finding.severity.needs_person
            and index not in self._claimed
            and not (self._suppressed is not None and self._suppressed(finding))
        ]
        if not findings:
            return result
        self._claimed.update(index for index, _ in findings)
        self.marks[original] = [finding for _, finding in findings]
        # A statement the rules changed may no longer show what its items were found on: it gets its markers even
        # without --todo-comments, so that they stay reported (the module is only written when changes are).
        changed = any(finding.severity.rewritten for finding in self._cell.findings[start:])
        if (self._todo or changed) and isinstance(result, STATEMENTS):
            module = self._cell.module
            header = module.header if module.body and original is module.body[0] else ()
            marked = add_markers(result, self.marks[original], header, self._cell.newline)
            self.marked = self.marked or marked is not result
            result = marked
        elif isinstance(result, STATEMENTS) and any(finding.lasting for _, finding in findings):
            self.lasting[result] = self.marks[original]  # marked if the file changes (see CellOutcome.lasting)
        return result
