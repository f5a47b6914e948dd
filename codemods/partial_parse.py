"""Parsing only the top-level statements of a cell that hold a word a rule asks for.

The rules say which words a top-level statement must hold for them to act on it
(:meth:`air_migrate.rule_base.Rule.statement_words`); in most files that is the imports and a few calls out of
hundreds of statements. So the cell is cut into statements without parsing it (:mod:`air_migrate.statements`),
only the statements that hold such a word are parsed (with the earlier cells' imports that hold one), and the others
become :class:`RawStatement` nodes: opaque, never visited by a rule, printed back as written. The module is the
whole cell again, so positions, code generation and the rest of the pass work as on a full parse, at the cost of
the statements that matter. The words a rule asks for may depend on the text it sees (the names a file imports from
``serverless_gpu``), so the choice is repeated on what it selects until the words stop growing.

Nothing is skipped unchecked: the statements left as text are checked with :mod:`ast` (Python's own parser, in
batches, which costs little memory), and the module put together must print as the text it came from (a cell whose
every statement is parsed is libcst's parse of that text, which prints it back byte for byte). Whenever a
step does not hold (a rule that must see everything, a text the scan cannot follow, a syntax error anywhere), the
caller parses the whole text instead, as before.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import TYPE_CHECKING, Callable, Dict, FrozenSet, List, Mapping, Optional, Sequence

import libcst

if TYPE_CHECKING:
    from libcst._nodes.internal import CodegenState

_CHECK_BATCH = 256 * 1024
"""Characters of text left unparsed that are checked with :mod:`ast` at a time (its tree of a 3 MB text takes
hundreds of MB; batches of this size take a few)."""


@dataclasses.dataclass(frozen=True)
class RawStatement(libcst.BaseStatement):
    """Top-level statements that no rule asked to see, kept as their text: never visited, printed as written."""

    text: str

    def _visit_and_replace_children(self, visitor: libcst.CSTVisitorT) -> "RawStatement":
        return self

    def _codegen_impl(self, state: "CodegenState") -> None:
        state.add_token(self.text)


@dataclasses.dataclass(frozen=True)
class PartialParse:
    """A cell parsed in part: the module of the whole cell, and what was parsed of it."""

    module: libcst.Module
    """The prefix statements kept, then every statement of the cell (a :class:`RawStatement` where not parsed)."""
    prefix_kept: Sequence[int]
    """Indices of the prefix statements (earlier cells' imports) that were kept, in order."""
    text: str
    """What was parsed: the kept prefix statements, then the parsed statements of the cell."""
    originals: FrozenSet[str]
    """The code of every parsed statement as read, to tell a changed statement from one left alone."""
    codes: Mapping[libcst.CSTNode, str]
    """The code of the module's top-level statements, as :meth:`libcst.Module.code_for_node` prints them, known
    without printing them (the first one is left out when the module has a header, the last when it has a footer:
    those lines are the module's, not the statement's)."""


WordsFor = Callable[[str], Optional[FrozenSet[str]]]
"""What the rules ask a statement to hold when they see ``text`` (``None``: they must see every statement)."""


def parse_partly(prefix: Sequence[str], chunks: Sequence[str], words_for: WordsFor) -> Optional[PartialParse]:
    """The module of ``prefix`` (statements, each ending in a line end) then ``chunks`` (the cell's statements,
    :func:`air_migrate.statements.split_statements`), parsing only the statements that hold a word ``words_for``
    asks for; ``None`` where the whole text must be parsed instead (see the module docstring). Raises
    :class:`libcst.ParserSyntaxError` when a selected statement does not parse."""
    words = words_for("")
    while True:
        if words is None:
            return None
        prefix_kept = [index for index, text in enumerate(prefix) if _holds(text, words)]
        kept = [index for index, text in enumerate(chunks) if _holds(text, words)]
        parsed_text = "".join(prefix[index] for index in prefix_kept) + "".join(chunks[index] for index in kept)
        asked = words_for(parsed_text)
        if asked is None:
            return None
        if asked <= words:
            break
        words = words | asked
    if not _parses(chunks, set(kept)):
        return None
    module = _assemble(libcst.parse_module(parsed_text), len(prefix_kept), chunks, set(kept))
    whole = "".join(prefix[index] for index in prefix_kept) + "".join(chunks)
    # Every statement parsed: the module is the parse of the text itself, which libcst prints back byte for byte.
    if module is None or (len(kept) < len(chunks) and module.code != whole):
        return None
    originals = frozenset([prefix[index] for index in prefix_kept] + [chunks[index] for index in kept])
    return PartialParse(
        module, prefix_kept, parsed_text, originals, _codes(module, [prefix[i] for i in prefix_kept], chunks)
    )


def changed_statements(module: libcst.Module, originals: FrozenSet[str]) -> str:
    """The code of the parsed statements of ``module`` that are not as they were read (new or changed), in order:
    what must be checked to parse again."""
    return "".join(
        code
        for code in (module.code_for_node(s) for s in module.body if not isinstance(s, RawStatement))
        if code not in originals
    )


def _codes(module: libcst.Module, prefix: Sequence[str], chunks: Sequence[str]) -> Dict[libcst.CSTNode, str]:
    codes: Dict[libcst.CSTNode, str] = dict(zip(module.body, [*prefix, *chunks]))
    if module.header and module.body:
        del codes[module.body[0]]
    if module.footer and module.body:
        codes.pop(module.body[-1], None)
    return codes


def _holds(text: str, words: FrozenSet[str]) -> bool:
    return any(word in text for word in words)


def _parses(chunks: Sequence[str], kept: set) -> bool:
    """The statements left as text are Python, checked in batches of consecutive statements."""
    batch: List[str] = []
    size = 0
    for index, chunk in enumerate(chunks):
        if index not in kept:
            batch.append(chunk)
            size += len(chunk)
        if batch and (index in kept or size >= _CHECK_BATCH or index == len(chunks) - 1):
            try:
                ast.parse("".join(batch))
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                return False
            batch, size = [], 0
    return True


def _assemble(parsed: libcst.Module, prefix_count: int, chunks: Sequence[str], kept: set) -> Optional[libcst.Module]:
    """The whole cell's module from the parse of the selected statements, or ``None`` when that parse does not
    give one statement per selected chunk, or would put lines after a statement that is not the cell's last."""
    if len(parsed.body) != prefix_count + len(kept):
        return None
    body: List[libcst.BaseStatement] = list(parsed.body[:prefix_count])
    statements = iter(parsed.body[prefix_count:])
    header = parsed.header
    first = True
    for index, chunk in enumerate(chunks):
        if index not in kept:
            body.append(RawStatement(chunk))
            continue
        statement = next(statements)
        if first and header and not prefix_count and body:  # text comes before it: the lines above it are its own
            statement = statement.with_changes(leading_lines=[*header, *statement.leading_lines])
            header = ()
        first = False
        body.append(statement)
    last_kept = len(chunks) - 1 in kept
    if parsed.footer and not last_kept:
        return None  # lines after the last parsed statement that libcst gave the module, not the statement
    return parsed.with_changes(
        header=header,
        body=body,
        has_trailing_newline=parsed.has_trailing_newline if last_kept else True,  # (a raw end prints as written)
    )
