"""Running the selected rules over one cell: one traversal, one set of metadata, positions of the input text.

Each rule gets a fresh instance per cell. All of them see the cell as it was read: metadata (positions, scopes,
qualified names) is computed once, on the original nodes, and every rule reports at original nodes, so a column
never shifts because another rule renamed something before it on the line. Changes are chained in code order: at
each node, a rule's ``leave_*`` receives the node as the rules before it left it (a rule that replaces a node by
one of another kind, or removes it, ends the chain for that node).

Before any cell of a file is transformed, every rule surveys every cell (:meth:`PreparedCell.survey`), which is how
a rule learns what other cells hold (e.g. whether a name is still used anywhere in a notebook).

The statements of the cell's prefix (earlier cells' imports, put first so that names resolve across cells) are
neither visited nor changed. With ``todo_comments``, each statement holding an item for a person gets a marker
comment (:mod:`air_migrate.todo_markers`); :meth:`PreparedCell.markers_only` gives the cell as read with only
those markers, for a file whose changes are held back.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Dict, FrozenSet, Iterator, List, Mapping, Optional, Sequence, Type, Union

import libcst
from libcst.metadata import CodeRange, CodePosition, MetadataWrapper, PositionProvider, ProviderT, ScopeProvider

from air_migrate.rule_base import STATEMENTS, CellContext, Finding, Rule
from air_migrate.todo_markers import MarkerInserter, add_markers


@dataclasses.dataclass
class CellOutcome:
    """What running the rules over a cell gave."""

    module: libcst.Module
    """The cell transformed (prefix included)."""
    findings: List[Finding]
    """In the order the rules reported them; positions in the parsed text (prefix included)."""
    marks: Dict[libcst.CSTNode, List[Finding]]
    """Original statement -> the findings for a person inside it (what gets a TODO marker)."""


class PreparedCell:
    """A parsed cell with its rules instantiated and their metadata at hand (each provider computed on first use),
    ready to be surveyed and run."""

    def __init__(
        self, module: libcst.Module, rule_types: Sequence[Type[Rule]], context: Optional[CellContext] = None,
        newline: str = "",
    ) -> None:
        self.module = module
        self.context = context if context is not None else CellContext()
        self.newline = newline
        """The cell's own line ending when it differs from the parsed text's default (for inserted lines)."""
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
        self._wrapper = MetadataWrapper(module, unsafe_skip_copy=True)  # the module is ours: no copy needed
        self.words = _words(self.rules)
        """What the rules ask a top-level statement to hold (``None``: every statement is traversed)."""
        if self.words is not None:
            own = module.body[len(self.context.prefix):]
            self.skipped = self.skipped | {s for s in own if not _holds_any(module, s, self.words)}
        positions = _StatementPositions(module, self.ancestors, self._wrapper)
        metadata = _LazyMetadata(self._wrapper, providers, self._scope_wrapper(module), positions)
        for rule in self.rules:
            rule.metadata = metadata  # type: ignore[assignment]

    def _scope_wrapper(self, module: libcst.Module) -> Optional[MetadataWrapper]:
        """Scopes computed over the statements that are traversed (and the prefix) only: every binding of a word a
        rule asks for spells that word, so it lies in a statement that is kept, and what those names resolve to is
        the same as over the whole cell at a fraction of the cost. ``None`` when nothing is left out."""
        kept = [statement for statement in module.body[: len(self.context.prefix)]]
        kept += [s for s in module.body[len(self.context.prefix):] if s not in self.skipped]
        if len(kept) == len(module.body):
            return None
        return MetadataWrapper(module.with_changes(body=kept), unsafe_skip_copy=True)

    def survey(self) -> None:
        """Let every rule look at the cell before any cell of the file is changed."""
        for rule in self.rules:
            rule.survey(self.module)

    def run(self, todo_comments: bool = False, suppressed: Optional[Callable[[Finding], bool]] = None) -> CellOutcome:
        """Transform the cell with every rule in one traversal; an item for a person that ``suppressed`` says a
        suppression comment hides gets no TODO marker."""
        traversal = _Traversal(self, todo_comments, suppressed)
        module = self.module.visit(traversal)
        return CellOutcome(module, list(self.findings), traversal.marks)

    def markers_only(self, marks: Dict[libcst.CSTNode, List[Finding]]) -> libcst.Module:
        """The cell as read, with only the TODO markers of ``marks`` added."""
        return self.module.visit(MarkerInserter(marks, self.newline))


class _LazyMetadata(Mapping):  # type: ignore[type-arg]
    """The rules' metadata, each provider computed the first time a rule asks for it (scopes and qualified names
    cost more than parsing: a cell where no rule needs them never pays for them)."""

    def __init__(
        self, wrapper: MetadataWrapper, providers: Sequence[ProviderT], scope_wrapper: Optional[MetadataWrapper],
        positions: "_StatementPositions",
    ) -> None:
        self._wrapper = wrapper
        self._scope_wrapper = scope_wrapper
        self._positions = positions
        self._providers = tuple(providers)

    def __getitem__(self, provider: ProviderT) -> Mapping:  # type: ignore[type-arg]
        if provider not in self._providers:
            raise KeyError(provider)
        if provider is PositionProvider:
            return self._positions
        if provider is ScopeProvider and self._scope_wrapper is not None:
            return self._scope_wrapper.resolve(provider)
        return self._wrapper.resolve(provider)

    def __contains__(self, provider: object) -> bool:
        return provider in self._providers

    def __iter__(self) -> Iterator[ProviderT]:
        return iter(self._providers)

    def __len__(self) -> int:
        return len(self._providers)


def _words(rules: Sequence[Rule]) -> Optional[FrozenSet[str]]:
    """What the rules ask a top-level statement to hold (:meth:`Rule.statement_words`); ``None`` for all."""
    words: set = set()
    for rule in rules:
        asked = rule.statement_words()
        if asked is None:
            return None
        words.update(asked)
    return frozenset(words)


class _StatementPositions(Mapping):  # type: ignore[type-arg]
    """``PositionProvider`` for a node inside the top-level statement being traversed, computed over that
    statement alone and shifted by the lines before it (a top-level statement starts at column 0); any other node
    gets the positions computed over the whole cell. A report rarely needs more than a few statements' positions,
    and the whole cell's cost as much as parsing it."""

    def __init__(self, module: libcst.Module, ancestors: List[libcst.CSTNode], wrapper: MetadataWrapper) -> None:
        self._module = module
        self._ancestors = ancestors
        self._wrapper = wrapper
        self._starts: Optional[Dict[libcst.CSTNode, int]] = None
        self._computed: Dict[libcst.CSTNode, Mapping] = {}  # type: ignore[type-arg]
        self._whole: Optional[Mapping] = None  # type: ignore[type-arg]

    def _local(self, node: libcst.CSTNode) -> Optional[Mapping]:  # type: ignore[type-arg]
        if len(self._ancestors) < 2 or self._module.default_newline not in ("\n", "\r\n"):
            return None
        statement = self._ancestors[1]
        found = self._computed.get(statement)
        if found is None:
            if self._starts is None:
                self._starts = {}
                line = len(self._module.header)
                for each in self._module.body:
                    self._starts[each] = line
                    line += self._module.code_for_node(each).count("\n")
            if statement not in self._starts:
                return None
            alone = self._module.with_changes(header=(), body=[statement], footer=())
            found = self._computed[statement] = _Shifted(
                MetadataWrapper(alone, unsafe_skip_copy=True).resolve(PositionProvider), self._starts[statement]
            )
        return found if node in found else None

    def _all(self) -> Mapping:  # type: ignore[type-arg]
        if self._whole is None:
            self._whole = self._wrapper.resolve(PositionProvider)
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


class _Shifted(Mapping):  # type: ignore[type-arg]
    """Positions computed over one statement alone, as lines of the whole cell."""

    def __init__(self, positions: Mapping, lines: int) -> None:  # type: ignore[type-arg]
        self._positions = positions
        self._lines = lines

    def __getitem__(self, node: libcst.CSTNode) -> CodeRange:
        found = self._positions[node]
        return CodeRange(CodePosition(found.start.line + self._lines, found.start.column),
                         CodePosition(found.end.line + self._lines, found.end.column))

    def __contains__(self, node: object) -> bool:
        return node in self._positions

    def __iter__(self) -> Iterator[libcst.CSTNode]:
        return iter(self._positions)

    def __len__(self) -> int:
        return len(self._positions)


def _holds_any(module: libcst.Module, statement: libcst.CSTNode, words: FrozenSet[str]) -> bool:
    text = module.code_for_node(statement)
    return any(word in text for word in words)


class _Traversal(libcst.CSTTransformer):
    """Dispatches each node to every rule in turn, and claims findings for the statements that hold them."""

    def __init__(
        self, cell: PreparedCell, todo_comments: bool, suppressed: Optional[Callable[[Finding], bool]] = None
    ) -> None:
        super().__init__()
        self._suppressed = suppressed
        self._cell = cell
        self._rules = cell.rules
        self._todo = todo_comments
        self._statement_starts: List[int] = []
        self._claimed: set = set()
        self._skipped = cell.skipped
        self.marks: Dict[libcst.CSTNode, List[Finding]] = {}

    def on_visit(self, node: libcst.CSTNode) -> bool:
        if node in self._skipped:
            return False
        if isinstance(node, STATEMENTS):
            self._statement_starts.append(len(self._cell.findings))
        self._cell.ancestors.append(node)
        # Children are visited unless every rule declines them (a rule declining alone still sees them).
        wanted = [rule.on_visit(node) for rule in self._rules]
        return any(wanted) or not wanted

    def on_leave(
        self, original_node: libcst.CSTNode, updated_node: libcst.CSTNode
    ) -> Union[libcst.CSTNode, libcst.RemovalSentinel, libcst.FlattenSentinel]:
        if original_node in self._skipped:
            return updated_node
        result: Union[libcst.CSTNode, libcst.RemovalSentinel, libcst.FlattenSentinel] = updated_node
        for rule in self._rules:
            result = rule.on_leave(original_node, result)  # type: ignore[arg-type]
            if type(result) is not type(original_node):
                break
        self._cell.ancestors.pop()
        if isinstance(original_node, STATEMENTS):
            result = self._claim(original_node, result)
        return result

    def on_visit_attribute(self, node: libcst.CSTNode, attribute: str) -> None:
        for rule in self._rules:
            rule.on_visit_attribute(node, attribute)

    def on_leave_attribute(self, original_node: libcst.CSTNode, attribute: str) -> None:
        for rule in self._rules:
            rule.on_leave_attribute(original_node, attribute)

    def _claim(self, original: libcst.CSTNode, result):  # type: ignore[no-untyped-def]
        """The innermost statement around an item for a person is the one its marker goes above."""
        start = self._statement_starts.pop()
        findings = [
            (index, finding)
            for index, finding in enumerate(self._cell.findings[start:], start=start)
            if finding.attention and index not in self._claimed
            and not (self._suppressed is not None and self._suppressed(finding))
        ]
        if not findings:
            return result
        self._claimed.update(index for index, _ in findings)
        self.marks[original] = [finding for _, finding in findings]
        if self._todo and isinstance(result, STATEMENTS):
            module = self._cell.module
            header = module.header if module.body and original is module.body[0] else ()
            result = add_markers(result, self.marks[original], header, self._cell.newline)
        return result
