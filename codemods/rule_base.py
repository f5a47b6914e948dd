"""What every rule shares: findings, reporting through one channel, what a rule knows of its cell, and the registry.

This is the contract between the driver (:mod:`air_migrate.engine`, :mod:`air_migrate.cell_pass`) and the rules
(:mod:`air_migrate.rules`): the rules import it, and the driver imports it, never a rule.

There are two kinds of rule, both registered by code in :data:`REGISTRY`:

* :class:`Rule`, a libcst transformer over one cell's Python. All the selected rules run together in ONE traversal
  of the cell as it was read (:mod:`air_migrate.cell_pass`), so every position a rule reports refers to the
  input text, whatever the other rules change;
* :class:`LineRule`, over the raw lines of a cell (``%pip`` and ``%run`` magics, ``# MAGIC`` lines), which libcst
  never sees.

Safety: a change is either safe (the program means the same) or flagged ``review`` (it is made, and a
person should check it, e.g. ``import *``); each rule's docstring says which of its changes are which. What a rule
cannot change correctly it leaves as written and reports as ``manual`` (``blocking`` when the file would be
half-migrated without it). Each finding has one :class:`Severity`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import (
    TYPE_CHECKING,
    Any,
    ClassVar,
    Collection,
    Dict,
    FrozenSet,
    List,
    Mapping,
    Optional,
    Sequence,
    Tuple,
    Type,
    TypeVar,
    Union,
)

import libcst
from libcst.metadata import PositionProvider, ProviderT

if TYPE_CHECKING:
    from air_migrate.sources import SourceFile

_EMPTY_MODULE = libcst.Module(body=())
STATEMENTS = (libcst.SimpleStatementLine, libcst.BaseCompoundStatement)
"""The nodes that are statements of a block (what a TODO marker goes above, what a removal takes out)."""


class Severity(str, enum.Enum):
    """What a finding (and the report's line for it) says was done, and what is left for a person; its value is the
    word the report prints."""

    INFO = "info"
    """Nothing to do: a note (a mention of the old package in prose, a suppression comment that suppresses nothing);
    it never fails ``--check``."""
    CHANGE = "change"
    """Rewritten; nothing more to do."""
    REVIEW = "review"
    """Rewritten, but a person should check the result (it may change what the code means, e.g. ``import *``)."""
    MANUAL = "manual"
    """Not rewritten: a person must do it; the rest of the file is still migrated."""
    BLOCKING = "blocking"
    """Not rewritten, and the file is left unchanged (unless ``--partial``) since half a migration would break it."""
    ERROR = "error"
    """The file could not be processed (a script that does not parse): it is left as it is, and the run exits 3.
    Only the driver reports it, never a rule."""

    __hash__ = str.__hash__  # equal to its word (``Severity.CHANGE == "change"``), so hashed as the word is

    def __str__(self) -> str:
        return self.value

    @property
    def rewritten(self) -> bool:
        """The code was rewritten (``change`` or ``review``)."""
        return self in (Severity.CHANGE, Severity.REVIEW)

    @property
    def needs_person(self) -> bool:
        """Nothing was rewritten and a person must decide (``manual`` or ``blocking``)."""
        return self in (Severity.MANUAL, Severity.BLOCKING)


@dataclasses.dataclass(frozen=True)
class Finding:
    """A change made, or something a person must look at, at a 1-based line and column of a cell."""

    code: str
    line: int
    column: int
    message: str
    severity: Severity = Severity.CHANGE
    end_line: Optional[int] = None
    end_column: Optional[int] = None
    """1-based, just past the last character of what was found (so a one-character node ends at ``column + 1``)."""
    before: Optional[str] = None
    """The source of what was found, as written."""
    after: Optional[str] = None
    """For a change: the source that replaces ``before``."""
    lasting: bool = False
    """An item for a person whose statement the rewrite leaves as it is, but whose reason it takes away (Spark set-up
    is reported while ``TorchDistributor`` is used): a write still leaves its marker, so it stays reported."""


@dataclasses.dataclass(frozen=True)
class PrefixStatement:
    """An import statement of an earlier cell, put before a cell's text so that its names resolve."""

    line: int
    """1-based line of the parsed text where the statement starts."""
    cell: int
    cell_line: int
    """Where the statement starts in its own cell (1-based)."""


@dataclasses.dataclass
class CellContext:
    """What the rules running over one cell know beyond its text."""

    number: int = 1
    """1-based cell number (1 for a plain script)."""
    prefix_lines: int = 0
    """How many lines of earlier cells' imports come before the cell's own text (never visited nor changed)."""
    prefix: Tuple[PrefixStatement, ...] = ()
    file: Dict[str, Any] = dataclasses.field(default_factory=dict)
    """Scratch shared by the rules of every cell of one file; fresh for each file, so nothing leaks between files."""
    text: str = ""
    """The parsed text, prefix included (empty when unknown), for rules to skip cheaply what cannot concern them.
    When only some of the cell's statements are parsed (:mod:`air_migrate.partial_parse`), it holds those: every
    statement that holds a word a rule asks for (:meth:`Rule.statement_words`)."""
    kind: str = "python"
    """The kind of file: ``python``, ``databricks`` or ``ipynb`` (see :mod:`air_migrate.sources`)."""
    unparsed: Sequence[str] = ()
    """The code of the file no rule sees (cells skipped or not valid Python, masked magics): a name that appears
    there may still be in use."""

    def origin(self, line: int) -> Tuple[int, int]:
        """``(cell, line in that cell)`` for a 1-based line of the parsed text (prefix included)."""
        if line > self.prefix_lines:
            return self.number, line - self.prefix_lines
        for statement in reversed(self.prefix):
            if statement.line <= line:
                return statement.cell, statement.cell_line + line - statement.line
        raise ValueError(f"line {line} is in no statement of the cell's prefix")


@dataclasses.dataclass(frozen=True)
class FileScan:
    """What a rule learns of a whole file before its cells are parsed (:meth:`Rule.scan_file`)."""

    parse: FrozenSet[int] = frozenset()
    """Cells to parse even if they mention no trigger word (a rewrite that spans cells must see the cell that
    defines a function as well as the one that runs it)."""
    findings: Tuple[Tuple[int, Finding], ...] = ()
    """``(cell number, finding at a line of that cell as written)``: what it found in cells no rule parses (a
    ``%%writefile`` cell, say); such a cell gets no other report of being skipped."""
    scratch: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    """Put into the file's :attr:`CellContext.file` before any cell is surveyed."""


class Rule(libcst.CSTTransformer):
    """Base of every libcst rule: ``CODE`` (e.g. ``AM101``) and a one-line ``DESCRIPTION`` for ``--list-rules``.

    A rule returns new nodes for what it changes and reports each change and each item for a person through
    :meth:`report`, always at an original node. It may look at every cell of the file first, in :meth:`survey`.
    """

    CODE: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    REPORTS: ClassVar[Mapping[str, str]] = {}
    """The other codes this rule reports, each with its one line for ``--list-rules``."""
    METADATA_DEPENDENCIES: ClassVar[Collection[ProviderT]] = (PositionProvider,)

    def __init__(self, context: Optional[CellContext] = None) -> None:
        super().__init__()
        self.context = context if context is not None else CellContext()
        self.findings: List[Finding] = []
        self.module: libcst.Module = _EMPTY_MODULE
        """The parsed cell, set by the pass that runs the rule (report snippets are printed with its settings)."""
        self.ancestors: List[libcst.CSTNode] = []
        """During the traversal: the original nodes from the module down to the node being visited or left (last),
        kept by the pass at no extra cost (``ParentNodeProvider`` walks the whole cell once more)."""
        self.statement_codes: Optional[Mapping[libcst.CSTNode, str]] = None
        """Set by the pass: the code of each statement of :attr:`module` as read, printed at most once per cell
        (see :meth:`statement_code`)."""

    @classmethod
    def scan_file(cls, source: "SourceFile") -> Optional[FileScan]:
        """Called once per file that passed the text pre-filter, before its cells are parsed; by default nothing."""
        return None

    def survey(self, module: libcst.Module) -> None:
        """Called on every cell of a file before any cell is transformed (metadata resolved); by default nothing."""

    def statement_words(self) -> Optional[Collection[str]]:
        """Words one of which a statement of the cell (at any depth: a top-level one, or one in the body of a
        function, a loop...) must hold for this rule to change or report anything in it, or ``None`` (the default)
        when the rule must see every statement. Asked once per cell, before the survey, on the text that will be
        parsed (:attr:`CellContext.text`). A top-level statement no rule wants is not parsed at all (most of a
        large file: :mod:`air_migrate.partial_parse`), a nested one is not traversed, and scopes are resolved over
        the top-level statements that are parsed (every binding of a word spells it, so those names resolve the
        same)."""
        return None

    def statement_code(self, statement: libcst.CSTNode) -> str:
        """The code of ``statement`` (of :attr:`module`, as read): what :meth:`libcst.Module.code_for_node` gives,
        without printing it again when the pass already knows it (most of a large cell's statements)."""
        if self.statement_codes is not None:
            return self.statement_codes[statement]
        return self.module.code_for_node(statement)

    def report(
        self,
        node: libcst.CSTNode,
        message: str,
        severity: Severity = Severity.CHANGE,
        *,
        code: str = "",
        after: Union[libcst.CSTNode, str, None] = None,
        lasting: bool = False,
    ) -> None:
        """Record a finding at ``node`` (an original node); ``code`` defaults to the rule's own.

        ``after`` is what replaces ``node``, for a change (a node, or ``""`` for a removal); the report shows both
        as source. ``lasting`` makes it an item that a write marks even where it does not change its statement
        (:attr:`Finding.lasting`).
        """
        where = self.get_metadata(PositionProvider, node)
        if isinstance(after, libcst.CSTNode):
            after = self.module.code_for_node(after)
        self.findings.append(
            Finding(
                code=code or self.CODE,
                line=where.start.line,
                column=where.start.column + 1,
                message=message,
                severity=severity,
                end_line=where.end.line,
                end_column=where.end.column + 1,
                before=self.module.code_for_node(node),
                after=after,
                lasting=lasting,
            )
        )


@dataclasses.dataclass(frozen=True)
class FileOptions:
    """What line rules need to know of the file and the command line."""

    kind: str = "python"
    """``python``, ``databricks`` or ``ipynb`` (see :mod:`air_migrate.sources`)."""
    fix_pip: bool = False
    pip_package: Optional[str] = None


@dataclasses.dataclass(frozen=True)
class LineFinding:
    """What a line rule found on one line; ``new_line`` is the line rewritten, for a change."""

    column: int
    end_column: int
    message: str
    severity: Severity = Severity.CHANGE
    new_line: Optional[str] = None


class LineRule:
    """Base of the rules over raw lines: ``CODE``, ``DESCRIPTION`` and :meth:`check`."""

    CODE: ClassVar[str]
    DESCRIPTION: ClassVar[str]
    REPORTS: ClassVar[Mapping[str, str]] = {}
    """The other codes this rule reports, each with its one line for ``--list-rules``."""

    def __init__(self, options: FileOptions) -> None:
        self.options = options

    def check(self, line: str, shell: bool = False) -> Optional[LineFinding]:
        """What this rule finds on ``line`` (without its line ending), or ``None``; ``shell`` when the line is in a
        shell cell (``%sh``, ``%%bash``), where commands are written without ``%`` or ``!``."""
        raise NotImplementedError


AnyRule = Union[Type[Rule], Type[LineRule]]
REGISTRY: Dict[str, AnyRule] = {}
R = TypeVar("R", bound=AnyRule)


def register(rule: R) -> R:
    """Class decorator: make a rule known by its code (and the other codes it reports, by :attr:`Rule.REPORTS`)."""
    taken = {code for known in REGISTRY.values() for code in (known.CODE, *known.REPORTS)}
    clashes = sorted(taken & {rule.CODE, *rule.REPORTS})
    if clashes:
        raise ValueError(f"code(s) {', '.join(clashes)} of {rule.__name__} are registered twice")
    REGISTRY[rule.CODE] = rule
    return rule
