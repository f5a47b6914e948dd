"""Module-level names bound to a literal, across the cells of a file: ``NUM_GPUS = 8`` and ``GPU_TYPE = "H100"``
given to ``@distributed(gpus=NUM_GPUS, gpu_type=GPU_TYPE)`` in the same script, or in a later cell of a notebook.

A notebook often keeps its settings in a first cell. The rules that read a count or a GPU type (AM103, AM108) see
through such a name when the file binds it exactly once, at module level, by a plain assignment of a literal
(``NAME = 8``, ``NAME: str = "H100"``), before the statement that reads it, and no code the tool cannot read
(a skipped cell, a magic) mentions it.

The bindings are found before any cell is parsed (:func:`scan_bound_names`, with :mod:`ast`, which is cheap), over
every Python cell that mentions a name given to a count or type keyword as it is, so that no binding in a cell that
no rule would otherwise parse is missed; those cells are then parsed too, so the rules see each binding and each
read of those names with libcst's scopes.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import weakref
from typing import Dict, FrozenSet, List, Optional, Pattern, Sequence, Set, Tuple, Union

import libcst
from libcst.metadata import GlobalScope, PositionProvider, ScopeProvider

from air_migrate.rule_base import CellContext, FileScan, Rule
from air_migrate.sources import SourceFile

SCRATCH = "bound_names"
"""The key of the file's :class:`BoundNames` in :attr:`~air_migrate.rule_base.CellContext.file`."""
Literal = Union[str, int]
Where = Tuple[int, int]
"""``(cell, line in the cell)``, both 1-based: the order in which a notebook runs its statements."""
_KEYWORD_VALUE = re.compile(
    r"\b(?:gpu_type|accelerator_type|gpus|num_accelerators)\s*=\s*(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*[,)]"
)
_CONSTANTS = frozenset({"True", "False", "None"})


@dataclasses.dataclass(frozen=True)
class NameBinding:
    """One module-level binding of a name."""

    where: Where
    literal: Optional[Literal] = None
    """The literal value of ``NAME = literal`` (a string or an ``int``); ``None`` for any other binding (an import,
    a ``def``, a loop, an expression...)."""
    top_level: bool = False
    """A top-level statement of its cell (not under an ``if``, a loop, a function with ``global``...)."""
    member: bool = False
    """The value is an attribute such as ``GPUType.H100`` (AM108's to report, where it is written)."""


@dataclasses.dataclass(frozen=True)
class BoundNames:
    """The module-level bindings of every name given as it is to a count or type keyword somewhere in the file."""

    bindings: Dict[str, Tuple[NameBinding, ...]]
    pattern: Pattern[str]
    """Finds one of those names in a text."""

    @property
    def names(self) -> FrozenSet[str]:
        return frozenset(self.bindings)

    def single_literal(self, name: str) -> Optional[NameBinding]:
        """The one binding of ``name`` when it is the file's only one and binds a literal."""
        found = self.bindings.get(name, ())
        return found[0] if len(found) == 1 and found[0].literal is not None and found[0].top_level else None


_last: List[Tuple["weakref.ReferenceType[SourceFile]", Optional[FileScan]]] = []


def scan_bound_names(source: SourceFile) -> Optional[FileScan]:
    """The cells to parse and the :class:`BoundNames` of a file (``None`` when no keyword is given a plain name).

    Several rules ask for the same file in turn: the last answer is kept, for that very file object only (held
    weakly, so that a large file is not kept alive once it is done).
    """
    if _last and _last[0][0]() is source:
        return _last[0][1]
    found = _scan(source)
    _last[:] = [(weakref.ref(source), found)]
    return found


def _scan(source: SourceFile) -> Optional[FileScan]:
    python = [cell for cell in source.cells if cell.code and cell.text is not None]
    names = {match.group("name") for cell in python for match in _KEYWORD_VALUE.finditer(cell.text or "")}
    names -= _CONSTANTS
    if not names:
        return None
    pattern = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, names))) + r")\b")
    bindings: Dict[str, List[NameBinding]] = {name: [] for name in names}
    wanted = set()
    for cell in python:
        if not pattern.search(cell.text or ""):
            continue
        wanted.add(cell.number)
        try:
            tree = ast.parse(cell.text or "")
        except (SyntaxError, ValueError):
            continue  # not parsed by libcst either: its text counts as unread code that mentions the name
        finder = _GlobalBindings(names, cell.number)
        finder.visit(tree)
        for name, binding in finder.found:
            bindings[name].append(binding)
    facts = BoundNames({name: tuple(found) for name, found in bindings.items()}, pattern)
    return FileScan(frozenset(wanted), scratch={SCRATCH: facts})


class _GlobalBindings(ast.NodeVisitor):
    """Every binding of the names in module scope: at module level, or in a function that declares them
    ``global``; a function's, class's, lambda's or comprehension's own names are not module-level."""

    def __init__(self, names: Set[str], cell: int) -> None:
        self._names = names
        self._cell = cell
        self._globals: List[Optional[Set[str]]] = [None]
        """Per scope being visited: ``None`` for the module, else the names it declares ``global``."""
        self.found: List[Tuple[str, NameBinding]] = []

    def _module_level(self, name: str) -> bool:
        declared = self._globals[-1]
        return declared is None or name in declared

    def _bind(
        self, name: str, node: ast.AST, literal: Optional[Literal] = None, member: bool = False, top_level: bool = False
    ) -> None:
        if name in self._names and self._module_level(name):
            where = (self._cell, getattr(node, "lineno", 1))
            self.found.append((name, NameBinding(where, literal, top_level, member)))

    def visit_Module(self, node: ast.Module) -> None:
        for statement in node.body:
            if not self._plain(statement, top_level=True):
                self.visit(statement)

    def _plain(self, statement: ast.stmt, top_level: bool = False) -> bool:
        """Record ``name = value`` (of one of the names) with its literal; False for any other statement."""
        target, value = _plain_assignment(statement)
        if target is None or target not in self._names:
            return False
        self._bind(target, statement, _literal(value), isinstance(value, ast.Attribute), top_level)
        if value is not None:
            self.visit(value)  # a walrus in the value binds too
        return True

    def visit_Assign(self, node: ast.Assign) -> None:
        if not self._plain(node):
            self.generic_visit(node)

    visit_AnnAssign = visit_Assign  # type: ignore[assignment]

    def _scope(self, node: ast.AST, body: Sequence[ast.AST], declared: Set[str]) -> None:
        self._globals.append(declared)
        for child in body:
            self.visit(child)
        self._globals.pop()

    def visit_FunctionDef(self, node: Union[ast.FunctionDef, ast.AsyncFunctionDef]) -> None:
        self._bind(node.name, node)
        for expression in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
            if expression is not None:
                self.visit(expression)
        self._scope(node, node.body, _declared_global(node.body))

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._bind(node.name, node)
        for expression in [*node.decorator_list, *node.bases, *(k.value for k in node.keywords)]:
            self.visit(expression)
        self._scope(node, node.body, _declared_global(node.body))

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._scope(node, [node.body], set())

    def _comprehension(self, node: ast.AST) -> None:
        # Its targets are its own; a walrus inside binds in the enclosing scope, which is this one.
        for child in ast.walk(node):
            if isinstance(child, ast.NamedExpr) and isinstance(child.target, ast.Name):
                self._bind(child.target.id, child)

    visit_ListComp = visit_SetComp = visit_DictComp = visit_GeneratorExp = _comprehension

    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            self._bind(node.id, node)

    def visit_Import(self, node: Union[ast.Import, ast.ImportFrom]) -> None:
        for alias in node.names:
            self._bind((alias.asname or alias.name).split(".")[0], node)

    visit_ImportFrom = visit_Import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._bind(node.name, node)
        self.generic_visit(node)

    def visit_MatchAs(self, node: ast.AST) -> None:
        name = getattr(node, "name", None)
        if name:
            self._bind(name, node)
        self.generic_visit(node)

    visit_MatchStar = visit_MatchAs


def _plain_assignment(statement: ast.stmt) -> Tuple[Optional[str], Optional[ast.expr]]:
    """``(name, value)`` for ``name = value`` and ``name: T = value`` (one target, a plain name)."""
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1 and isinstance(statement.targets[0], ast.Name):
        return statement.targets[0].id, statement.value
    if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name) and statement.simple:
        return statement.target.id, statement.value
    return None, None


def _literal(value: Optional[ast.expr]) -> Optional[Literal]:
    if isinstance(value, ast.Constant) and (type(value.value) is str or type(value.value) is int):
        return value.value
    return None


def _declared_global(body: Sequence[ast.stmt]) -> Set[str]:
    """The names a function or class body declares ``global`` (not those of functions nested in it)."""
    declared: Set[str] = set()
    stack: List[ast.AST] = list(body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Global):
            declared.update(node.names)
        elif not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
    return declared


# --- reading a name where it is used ---------------------------------------------------------------------------


def facts(context: CellContext) -> Optional[BoundNames]:
    """The file's bound names, when the scan found any."""
    found = context.file.get(SCRATCH)
    return found if isinstance(found, BoundNames) else None


def words(context: CellContext) -> FrozenSet[str]:
    """The bound names a statement may hold, for :meth:`~air_migrate.rule_base.Rule.statement_words`."""
    found = facts(context)
    return found.names if found is not None else frozenset()


def is_module_level(rule: Rule, name: libcst.Name) -> bool:
    """``name`` reads a module-level variable where it is written (no function or class around it binds it)."""
    scope = rule.get_metadata(ScopeProvider, name, None)
    if scope is None:
        return False
    while not isinstance(scope, GlobalScope):
        if name.value in scope.assignments:
            return False
        scope = scope.parent
    return True


def where(rule: Rule, node: libcst.CSTNode) -> Where:
    """``(cell, line)`` of a node of the cell ``rule`` runs over."""
    return rule.context.origin(rule.get_metadata(PositionProvider, node).start.line)


def mentioned_unread(context: CellContext, name: str) -> bool:
    """``name`` appears in code no rule parses (a skipped cell, a magic), which may bind or read it."""
    word = re.compile(rf"(?<![\w.]){re.escape(name)}\b")
    return any(word.search(text) for text in context.unparsed)


def literal_binding(rule: Rule, name: libcst.Name) -> Optional[NameBinding]:
    """The binding ``NAME = literal`` that ``name`` reads, when it is the only one of the file, it comes before this
    read, and nothing the tool cannot read mentions the name; else ``None``."""
    found = facts(rule.context)
    binding = found.single_literal(name.value) if found is not None else None
    if binding is None or not is_module_level(rule, name) or mentioned_unread(rule.context, name.value):
        return None
    return binding if binding.where < where(rule, name) else None


def int_value(rule: Rule, name: libcst.Name) -> Optional[int]:
    """The integer ``name`` is bound to (:func:`literal_binding`), for a count such as ``gpus=NUM_GPUS``."""
    binding = literal_binding(rule, name)
    return binding.literal if binding is not None and isinstance(binding.literal, int) else None
