"""Griffe extension: render the reStructuredText bits of our docstrings as Markdown.

The docstrings use Google-style sections (which mkdocstrings understands) with reST inline roles and literal blocks
(which it would show verbatim). Before the API pages are rendered, this extension rewrites:

* ``:class:`~databricks.air.exceptions.GPUTypeError``` (and ``:func:``, ``:meth:``, ``:mod:``, ``:exc:``,
  ``:attr:``, ``:data:``, ``:obj:``) into a cross-reference to that object's entry, shown as code. A relative name
  is looked up from the documented object outwards; a leading ``~`` shows only the last component. The reference is
  optional: a name with no entry in the site (``RuntimeError``) is shown as code without a link.
* a paragraph ending in ``::`` followed by an indented block into a paragraph ending in ``:`` and a fenced Python
  code block (``Example::`` becomes a bold ``Example:`` so that it is not read as a Google section title).
"""

from __future__ import annotations

import html
import re
import textwrap
from typing import Any, Iterator, List, Optional

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|exc|attr|data|obj|py:\w+):`(?P<target>[^`]+)`")
_SECTION_TITLES = {
    "example",
    "examples",
    "note",
    "notes",
    "warning",
    "warnings",
    "args",
    "arguments",
    "parameters",
    "returns",
    "return",
    "raises",
    "yields",
    "attributes",
    "see also",
    "todo",
    "tip",
    "important",
}


def rewrite_roles(text: str, resolve: Any) -> str:
    """Replace every reST role in ``text``; ``resolve(name)`` returns the full path of ``name`` or ``None``."""

    def replace(match: "re.Match[str]") -> str:
        target = match.group("target").strip()
        short = target.startswith("~")
        name = target.lstrip("~").rstrip("()")
        if "<" in name and name.endswith(">"):  # :class:`title <path>`
            title, name = name[: name.index("<")].strip(), name[name.index("<") + 1 : -1].strip()
        else:
            title = name.rsplit(".", 1)[-1] if short else name
        if target.endswith("()"):
            title += "()"
        path = resolve(name) or name
        return (
            f'<autoref identifier="{html.escape(path, quote=True)}" optional>'
            f"<code>{html.escape(title)}</code></autoref>"
        )

    return ROLE.sub(replace, text)


def rewrite_literal_blocks(text: str) -> str:
    """Turn reST literal blocks (``paragraph::`` + indented lines) into fenced Python code blocks."""
    lines = text.splitlines()
    out: List[str] = []
    index = 0
    while index < len(lines):
        line = lines[index]
        if not line.rstrip().endswith("::") or line.strip() == "" or _inside_fence(out):
            out.append(line)
            index += 1
            continue
        indent = len(line) - len(line.lstrip())
        block_start = index + 1
        while block_start < len(lines) and not lines[block_start].strip():
            block_start += 1
        block_end = block_start
        while block_end < len(lines) and (
            not lines[block_end].strip() or len(lines[block_end]) - len(lines[block_end].lstrip()) > indent
        ):
            block_end += 1
        while block_end > block_start and not lines[block_end - 1].strip():
            block_end -= 1
        if block_end == block_start:  # no indented block follows: an ordinary "::" in prose
            out.append(line)
            index += 1
            continue
        lead = line.rstrip()[:-2].rstrip()
        if lead.strip().lower() in _SECTION_TITLES:
            lead = f"{' ' * indent}**{lead.strip()}:**"
        elif lead.strip():
            lead += ":"
        if lead.strip():
            out += [lead, ""]
        code = textwrap.dedent("\n".join(lines[block_start:block_end]))
        pad = " " * indent
        out.append(f"{pad}```python")
        out += [f"{pad}{code_line}" if code_line else "" for code_line in code.splitlines()]
        out.append(f"{pad}```")
        index = block_end
    return "\n".join(out)


def _inside_fence(lines: List[str]) -> bool:
    return sum(1 for line in lines if line.strip().startswith("```")) % 2 == 1


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    yield obj
    for member in obj.members.values():
        if member.is_alias:
            continue
        yield from _objects(member)  # type: ignore[arg-type]


class SphinxRoles(griffe.Extension):
    """Rewrite reST roles and literal blocks in every docstring of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        for obj in _objects(pkg):
            docstring = obj.docstring
            if docstring is None:
                continue
            value = rewrite_literal_blocks(docstring.value)
            docstring.value = rewrite_roles(value, lambda name, obj=obj: _resolve(name, obj, loader))


def _resolve(name: str, obj: griffe.Object, loader: griffe.GriffeLoader) -> Optional[str]:
    """The path of the object ``name`` refers to, looked up from ``obj`` outwards, or ``None``."""
    scopes: List[str] = []
    scope: Optional[griffe.Object] = obj
    while scope is not None:
        scopes.append(scope.path)
        scope = scope.parent
    candidates = [name] + [f"{path}.{name}" for path in scopes]
    for candidate in candidates:
        try:
            found = loader.modules_collection.get_member(candidate)
        except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            continue
        if found is not None:
            return candidate
    return None
