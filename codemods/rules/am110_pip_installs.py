"""AM110: lines that install ``serverless_gpu`` with pip are reported; ``--fix-pip`` rewrites them.

Recognised: ``%pip install ...`` and ``!pip install ...`` (also ``pip3``, ``python -m pip``, ``{sys.executable} -m
pip``), in notebook cells and as Databricks ``# MAGIC %pip`` lines, and plain ``pip install ...`` lines of shell
cells (Databricks ``%sh``, Jupyter ``%%sh``/``%%bash``; after ``sudo`` or a chained ``&&`` too), naming
``serverless_gpu`` in any case and with ``-``, ``_`` or ``.`` (pip treats them alike), with or without extras and a
version specifier, quoted or not.

With ``fix_pip``, each such requirement becomes the new package: ``databricks-sdk-air`` (what Databricks ships) in a
Databricks notebook source, this project's ``databricks-air-oss`` elsewhere, ``pip_package`` overriding both. The rest
of the line (other packages, flags, spacing, quotes, a comment) is kept byte for byte. A version specifier is dropped,
since it applies to ``serverless_gpu`` and not to the new package, and the report says so. A line that already
installs the new package only loses the ``serverless_gpu`` requirement. A mention that is not a plain requirement
(a URL, a requirements file) is reported and left. This rewrite is the only edit ever made inside a ``# MAGIC`` cell.

Safety: safe, except that a dropped version specifier or kept extras are flagged ``review``.
"""

from __future__ import annotations

import re
from typing import List, Optional

from air_migrate.rule_base import FileOptions, LineFinding, LineRule, Severity, register

DATABRICKS_PACKAGE = "databricks-sdk-air"
OPEN_PACKAGE = "databricks-air-oss"
_INSTALL = re.compile(
    r"^(?P<lead>[ \t]*(?:# MAGIC ?)?[ \t]*)[%!][ \t]*"
    r"(?:(?:\{[^}]*\}|\S*python[\d.]*)[ \t]+-m[ \t]+)?pip3?[ \t]+install\b(?P<args>.*)$",
    re.IGNORECASE,
)
# In a shell cell (``%sh``, ``%%bash``) commands carry no ``%``/``!``: ``pip install``, possibly after ``sudo``, after
# the ``%sh`` of a one-line Databricks cell, or after other commands chained with ``&&``, ``||`` or ``;``.
_SHELL_INSTALL = re.compile(
    r"^(?P<lead>[ \t]*(?:# MAGIC ?)?[ \t]*(?:%sh\b[ \t]*)?(?:[^#]*?(?:&&|\|\||;)[ \t]*)?)"
    r"(?:sudo[ \t]+(?:-\S+[ \t]+)*)?(?:\S*python[\d.]*[ \t]+-m[ \t]+)?pip3?[ \t]+install\b(?P<args>.*)$",
    re.IGNORECASE,
)
_MENTION = re.compile(r"(?<![\w-])serverless[-_.]gpu(?![\w-])", re.IGNORECASE)
_COMMENT = re.compile(r"(?:^|(?<=\s))#")
_TOKEN = re.compile(r"""(?:"[^"]*"|'[^']*'|[^\s"'])+""")
_REQUIREMENT = re.compile(
    r"""(?P<quote>["']?)(?P<name>serverless[-_.]gpu)(?P<extras>\[[^\]]*\])?"""
    r"""(?P<spec>\s*(?:===|==|!=|~=|>=|<=|>|<)\s*[^"'\s,]*(?:\s*,\s*(?:===|==|!=|~=|>=|<=|>|<)\s*[^"'\s,]*)*)?"""
    r"""\s*(?P=quote)""",
    re.IGNORECASE,
)
_VALID_PACKAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(\[[A-Za-z0-9._,-]*\])?([<>=!~]=?=?[A-Za-z0-9.*+!_-]+)?")


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def validate_pip_package(name: str) -> str:
    """``name`` when it is one requirement pip can take on a command line, else a ``ValueError`` saying why."""
    if not _VALID_PACKAGE.fullmatch(name):
        raise ValueError(
            f"--pip-package {name!r} is not one package requirement: give a name such as databricks-air-oss, "
            "optionally with extras or one version specifier (databricks-air-oss==0.3), without spaces or quotes"
        )
    return name


@register
class PipInstallsRule(LineRule):
    CODE = "AM110"
    DESCRIPTION = "a %pip/!pip install of serverless_gpu: reported; rewritten with --fix-pip (other packages kept)"

    def __init__(self, options: FileOptions) -> None:
        super().__init__(options)
        if options.pip_package is not None:
            validate_pip_package(options.pip_package)

    @property
    def package(self) -> str:
        """What replaces serverless_gpu on the line."""
        if self.options.pip_package:
            return self.options.pip_package
        return DATABRICKS_PACKAGE if self.options.kind == "databricks" else OPEN_PACKAGE

    def check(self, line: str, shell: bool = False) -> Optional[LineFinding]:
        install = (_SHELL_INSTALL if shell else _INSTALL).match(line)
        if install is None:
            return None
        start = install.start("args")
        args = _COMMENT.split(install.group("args"), maxsplit=1)[0]  # what follows a shell comment is not installed
        if not _MENTION.search(args):
            return None
        tokens = [t for t in _TOKEN.finditer(args) if _REQUIREMENT.fullmatch(t.group())]
        if not tokens:
            mention = _MENTION.search(line, start)
            assert mention is not None
            return LineFinding(
                mention.start() + 1,
                mention.end() + 1,
                "installs serverless_gpu in a form --fix-pip cannot rewrite (a URL, a file): change it by hand "
                f"to {self.package}",
                severity=Severity.MANUAL,
            )
        first = start + tokens[0].start() + 1
        last = start + tokens[-1].end() + 1
        if not self.options.fix_pip:
            return LineFinding(
                first,
                last,
                f"installs serverless_gpu: install {self.package} instead (--fix-pip rewrites this line)",
                severity=Severity.MANUAL,
            )
        return self._rewrite(line, start, tokens, first, last)

    def _rewrite(self, line: str, start: int, tokens: List["re.Match[str]"], first: int, last: int) -> LineFinding:
        package = self.package
        args = line[start:]
        installed = _COMMENT.split(args, maxsplit=1)[0]
        present = any(
            _normalized(re.split(r"[\[<>=!~;\s]", t.group().strip("\"'"), maxsplit=1)[0])
            == _normalized(re.split(r"[\[<>=!~]", package, maxsplit=1)[0])
            for t in _TOKEN.finditer(installed)
        )
        notes: List[str] = []
        pieces: List[str] = []
        position = 0
        for token in tokens:
            requirement = _REQUIREMENT.fullmatch(token.group())
            assert requirement is not None
            quote, extras, spec = requirement.group("quote"), requirement.group("extras"), requirement.group("spec")
            if spec:
                notes.append(
                    f"the version specifier {spec.strip()} is dropped: it applies to serverless_gpu, not to {package}"
                )
            if present:
                cut = token.start()
                while cut > position and args[cut - 1] in " \t":
                    cut -= 1
                pieces.append(args[position:cut])
            else:
                if extras:
                    notes.append(f"the extras {extras} are kept: check that {package} provides them")
                pieces.append(args[position : token.start()] + f"{quote}{package}{extras or ''}{quote}")
            position = token.end()
        pieces.append(args[position:])
        new_line = line[:start] + "".join(pieces)
        action = (
            f"serverless_gpu removed ({package} is already installed here)"
            if present
            else f"serverless_gpu -> {package}"
        )
        message = "; ".join([action] + notes)
        return LineFinding(
            first, last, message, severity=Severity.REVIEW if notes else Severity.CHANGE, new_line=new_line
        )
