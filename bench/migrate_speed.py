"""How fast ``air-migrate`` runs on a repository, a notebook and a set of large files, against libcst's own codemod.

What it measures
    Each figure is the wall time of the whole command as a user runs it: a subprocess of ``python -m air_migrate``
    (which is what the ``air-migrate`` script runs) in write mode, from start to exit, interpreter start-up and
    imports included. Before every repetition the corpus is copied afresh (not timed), so every run does the full
    work. Best of ``--repeats`` (default 3); a case whose runs add up to more than ``--case-seconds`` stops repeating.
    The table also gives the CPU time (user + system, worker processes included) of the best run: on a machine
    shared with other jobs, wall times stretch but CPU times much less, so they show what the work costs.

    a. 1,000 Python files with nothing to migrate: ML training code of 27 to 870 lines (mean 138),
       generated from seeded blocks (configs, datasets, models, training and evaluation loops, checkpoints); 50 of
       them mention ``num_gpus``/``--gpus`` as real device set-up code does, so they get past a text pre-filter;
    b. a 200-cell Jupyter notebook (about a quarter markdown) with ``serverless_gpu`` imports in several cells,
       decorators with the old keywords, ``%pip``, line magics, ``x = !cmd``, ``%%time`` and ``%%bash`` cells;
       and the same cells as a Databricks notebook source (``# MAGIC`` cells, ``# COMMAND ----------``);
    c. 100 files of about 500 lines, each importing ``serverless_gpu`` (every import form) and decorating 2 to 4
       functions with old keywords, with ``-j2``; and with ``-j1`` for reference;
    d. anchor: corpus (c) through libcst's own ``python -m libcst.tool codemod rename.RenameCommand --old_name
       serverless_gpu --new_name databricks.air`` with ``-j 2 --no-format`` (a ``.libcst.codemod.yaml`` written by
       ``python -m libcst.tool initialize`` sits in the scratch directory). It renames imports only, so it does
       less than (c); the ratio (c)/(d) says what our extra rules and checks cost next to libcst's own machinery.

    Every run is checked, so that a fast but wrong run cannot look good: (a) every file's bytes are unchanged and
    the summary counts every file; (b) the cell count, markdown cells and magic lines are unchanged, and no
    ``serverless_gpu`` import, no ``gpus=`` keyword is left, with one ``num_accelerators=`` per old decorator;
    (c) every file changed and parses, with no ``serverless_gpu`` import or ``gpus=``/``gpu_type=`` keyword left
    and one ``num_accelerators=`` per old decorator, and ``-j1`` and ``-j2`` give the same files and the same report;
    (d) libcst exits 0 and leaves no ``serverless_gpu`` import.

Budgets (issue 5, on the project's 2-core machines)
    a <= 5 s; b <= 2 s (each form); c (-j2) <= 30 s. Nothing asserts on time: an over-budget case says ``over``.
    The script exits non-zero only when a command fails or a check finds a wrong result.

Run: ``.venv/bin/python bench/migrate_speed.py`` (full; minutes) or ``--quick`` (10x smaller corpora, one run each,
no budgets judged). ``--cases a,b-ipynb`` runs only those cases; ``--keep`` leaves the scratch directory for
inspection.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
import migrate_corpus as corpus

SEED = 20261129
OUR_COMMAND = [sys.executable, "-m", "air_migrate"]
LIBCST_COMMAND = [
    sys.executable, "-m", "libcst.tool", "codemod", "rename.RenameCommand", "-j", "2", "--no-format",
    "--hide-progress", "--old_name", "serverless_gpu", "--new_name", "databricks.air",
]
CASE_KEYS = ("a", "b-ipynb", "b-databricks", "c-j2", "c-j1", "d")
_OLD_IMPORT = re.compile(r"^\s*(from|import)\s+serverless_gpu\b", re.MULTILINE)
_OLD_KEYWORD = re.compile(r"\bgpus\s*=|\bgpu_type\s*=")


class WrongResult(Exception):
    """A command failed, or its output is not what a correct migration gives."""


@dataclasses.dataclass(frozen=True)
class Sizes:
    plain_files: int
    near_misses: int
    cells: int
    matching_files: int
    matching_lines: int


FULL = Sizes(plain_files=1000, near_misses=50, cells=200, matching_files=100, matching_lines=500)
QUICK = Sizes(plain_files=100, near_misses=5, cells=20, matching_files=10, matching_lines=500)


@dataclasses.dataclass
class Case:
    """One row of the table: a command over a corpus, its budget, and the check of each run's result."""

    key: str
    """Short name (``a``, ``c-j2``...), also the folder of the last run's result under the scratch directory."""
    label: str
    corpus: str
    """Name of the pristine corpus (file or folder) under the scratch directory's ``pristine/``."""
    command: Sequence[str]
    check: Callable[[str, "Run"], None]
    budget: Optional[float] = None
    times: List[float] = dataclasses.field(default_factory=list)
    cpu: List[float] = dataclasses.field(default_factory=list)
    """CPU seconds (user + system) of each run, its worker processes included."""
    last: Optional["Run"] = None

    @property
    def best(self) -> float:
        return min(self.times)


@dataclasses.dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    target: str
    """Path of the migrated copy."""


def run_case(case: Case, scratch: str, repeats: int, case_seconds: float) -> None:
    """Time ``case`` ``repeats`` times (fewer when its runs pass ``case_seconds``), checking every result."""
    pristine = os.path.join(scratch, "pristine", case.corpus)
    for repeat in range(repeats):
        work = os.path.join(scratch, "work")
        shutil.rmtree(work, ignore_errors=True)
        os.makedirs(work)
        target = os.path.join(work, case.corpus)
        if os.path.isdir(pristine):
            shutil.copytree(pristine, target)
        else:
            shutil.copy2(pristine, target)
        shutil.copy2(os.path.join(scratch, ".libcst.codemod.yaml"), work)
        with open(os.path.join(scratch, "stdout"), "w+") as out, open(os.path.join(scratch, "stderr"), "w+") as err:
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            completed = subprocess.run([*case.command, case.corpus], cwd=work, stdout=out, stderr=err)
            elapsed = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            out.seek(0)
            err.seek(0)
            run = Run(completed.returncode, out.read(), err.read(), target)
        case.check(pristine, run)
        case.times.append(elapsed)
        case.cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        # Keep the migrated tree of the last run for comparisons between cases.
        kept = os.path.join(scratch, "result", case.key)
        shutil.rmtree(kept, ignore_errors=True)
        shutil.move(target, kept)
        case.last = dataclasses.replace(run, target=kept)
        if sum(case.times) > case_seconds:
            break


# --- checks -----------------------------------------------------------------------------------------------------


def _expect_exit(run: Run, code: int, what: str) -> None:
    if run.returncode != code:
        raise WrongResult(
            f"{what}: exit code {run.returncode}, expected {code}\nstderr (end):\n{run.stderr[-2000:]}"
        )


def _files(root: str) -> Dict[str, bytes]:
    found = {}
    for directory, _, names in os.walk(root):
        for name in names:
            path = os.path.join(directory, name)
            with open(path, "rb") as stream:
                found[os.path.relpath(path, root)] = stream.read()
    return found


def check_unchanged(count: int) -> Callable[[str, Run], None]:
    def check(pristine: str, run: Run) -> None:
        _expect_exit(run, 0, "no-match corpus")
        if _files(pristine) != _files(run.target):
            raise WrongResult("no-match corpus: a file changed although nothing in it is to migrate")
        if not re.search(rf"\b{count} file", run.stderr):
            raise WrongResult(f"no-match corpus: the summary does not count {count} files:\n{run.stderr[-2000:]}")
        if re.search(r"\bAM\d{3}\b", run.stdout):
            raise WrongResult(f"no-match corpus: report lines for files with nothing to migrate:\n{run.stdout[:2000]}")

    return check


def _python_checks(text: str, decorators: int, what: str) -> None:
    if _OLD_IMPORT.search(text):
        raise WrongResult(f"{what}: a serverless_gpu import is left")
    if _OLD_KEYWORD.search(text):
        raise WrongResult(f"{what}: an old keyword (gpus=, gpu_type=) is left")
    found = text.count("num_accelerators=")
    if found != decorators:
        raise WrongResult(f"{what}: {found} num_accelerators= written, expected {decorators}")


def _magic_lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line.lstrip().startswith(("%", "!", "# MAGIC")) or "= !" in line]


def check_ipynb(cells: Sequence[corpus.NotebookCell]) -> Callable[[str, Run], None]:
    def check(pristine: str, run: Run) -> None:
        _expect_exit(run, 0, ".ipynb")
        with open(pristine, encoding="utf-8") as stream:
            before = json.load(stream)["cells"]
        with open(run.target, encoding="utf-8") as stream:
            after = json.load(stream)["cells"]
        if len(after) != len(before):
            raise WrongResult(f".ipynb: {len(after)} cells after, {len(before)} before")
        code = []
        for old, new in zip(before, after):
            if old["cell_type"] != "code" and old != new:
                raise WrongResult(".ipynb: a markdown cell changed")
            if old["cell_type"] == "code":
                old_text, new_text = "".join(old["source"]), "".join(new["source"])
                if _magic_lines(old_text) != _magic_lines(new_text):
                    raise WrongResult(f".ipynb: magic lines changed in a cell:\n{old_text}")
                if not old_text.lstrip().startswith("%%bash"):  # not Python, so never migrated
                    code.append(new_text)
        _python_checks("\n".join(code), sum(cell.decorators for cell in cells), ".ipynb")

    return check


def check_databricks(cells: Sequence[corpus.NotebookCell]) -> Callable[[str, Run], None]:
    def check(pristine: str, run: Run) -> None:
        _expect_exit(run, 0, "Databricks source")
        with open(pristine, encoding="utf-8") as stream:
            before = stream.read()
        with open(run.target, encoding="utf-8") as stream:
            after = stream.read()
        if after.count("# COMMAND ----------") != before.count("# COMMAND ----------"):
            raise WrongResult("Databricks source: the number of cells changed")
        if _magic_lines(after) != _magic_lines(before):
            raise WrongResult("Databricks source: # MAGIC lines changed")
        python = "\n".join(line for line in after.splitlines() if not line.startswith("# MAGIC"))
        _python_checks(python, sum(cell.decorators for cell in cells), "Databricks source")

    return check


def _old_imports_and_keywords(text: str) -> List[str]:
    """What a correct migration leaves none of: ``serverless_gpu`` imports, ``gpus=``/``gpu_type=`` keywords."""
    left = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            left += [alias.name for alias in node.names if alias.name.split(".")[0] == "serverless_gpu"]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "serverless_gpu":
            left.append(node.module or "")
        elif isinstance(node, ast.keyword) and node.arg in ("gpus", "gpu_type"):
            left.append(f"{node.arg}=")
    return left


def check_matching(files: Sequence[corpus.MatchingFile], scratch: str) -> Callable[[str, Run], None]:
    decorators = {os.path.relpath(f.path, os.path.join(scratch, "pristine", "matching")): f.decorators for f in files}

    def check(pristine: str, run: Run) -> None:
        _expect_exit(run, 0, "matching corpus")
        before, after = _files(pristine), _files(run.target)
        if set(before) != set(after):
            raise WrongResult("matching corpus: files appeared or disappeared")
        for name, data in after.items():
            text = data.decode("utf-8")
            if data == before[name]:
                raise WrongResult(f"matching corpus: {name} did not change")
            left = _old_imports_and_keywords(text)
            if left:
                raise WrongResult(f"matching corpus: {name} still has {left}")
            if text.count("num_accelerators=") != decorators[name]:
                raise WrongResult(f"matching corpus: {name} has {text.count('num_accelerators=')} "
                                  f"num_accelerators=, expected {decorators[name]}")

    return check


def check_libcst(pristine: str, run: Run) -> None:
    _expect_exit(run, 0, "libcst RenameCommand")
    for name, data in _files(run.target).items():
        text = data.decode("utf-8")
        if any(not item.endswith("=") for item in _old_imports_and_keywords(text)):
            raise WrongResult(f"libcst RenameCommand left a serverless_gpu import in {name}")


def same_result(one: Case, other: Case) -> None:
    """``-j1`` and ``-j2`` must write the same files and the same report, in the same order."""
    assert one.last is not None and other.last is not None
    if _files(one.last.target) != _files(other.last.target):
        raise WrongResult(f"{one.label} and {other.label} wrote different files")
    if one.last.stdout != other.last.stdout:
        raise WrongResult(f"{one.label} and {other.label} printed different reports")


# --- the run ----------------------------------------------------------------------------------------------------


def build_corpora(scratch: str, sizes: Sizes) -> Dict[str, object]:
    """Write every corpus under ``scratch/pristine`` and libcst's configuration in ``scratch``."""
    pristine = os.path.join(scratch, "pristine")
    corpus.write_plain_files(os.path.join(pristine, "plain"), sizes.plain_files, SEED, sizes.near_misses)
    matching = corpus.write_matching_files(
        os.path.join(pristine, "matching"), sizes.matching_files, sizes.matching_lines, SEED + 1
    )
    cells = corpus.notebook_cells(sizes.cells, SEED + 2)
    corpus.write_ipynb(os.path.join(pristine, "notebook.ipynb"), cells)
    corpus.write_databricks(os.path.join(pristine, "notebook.py"), cells)
    subprocess.run(
        [sys.executable, "-m", "libcst.tool", "initialize", "."], cwd=scratch, check=True, stdout=subprocess.DEVNULL
    )
    return {"matching": matching, "cells": cells}


def cases(scratch: str, sizes: Sizes, built: Dict[str, object], quick: bool) -> Dict[str, Case]:
    matching: List[corpus.MatchingFile] = built["matching"]  # type: ignore[assignment]
    cells: List[corpus.NotebookCell] = built["cells"]  # type: ignore[assignment]
    lines = sizes.matching_lines

    def budget(seconds: float) -> Optional[float]:
        return None if quick else seconds  # a quick run's corpora are smaller: its times are not judged

    all_cases = [
        Case("a", f"a. {sizes.plain_files:,} files, no match ({sizes.near_misses} mention gpus)", "plain",
             OUR_COMMAND, check_unchanged(sizes.plain_files), budget(5.0)),
        Case("b-ipynb", f"b. {sizes.cells}-cell .ipynb with matches", "notebook.ipynb",
             OUR_COMMAND, check_ipynb(cells), budget(2.0)),
        Case("b-databricks", "b. same cells as a Databricks .py source", "notebook.py",
             OUR_COMMAND, check_databricks(cells), budget(2.0)),
        Case("c-j2", f"c. {sizes.matching_files} matching files x ~{lines} lines, -j2", "matching",
             [*OUR_COMMAND, "-j2"], check_matching(matching, scratch), budget(30.0)),
        Case("c-j1", "c. same, -j1 (reference)", "matching", [*OUR_COMMAND, "-j1"], check_matching(matching, scratch)),
        Case("d", "d. anchor: libcst RenameCommand on (c), -j 2", "matching", LIBCST_COMMAND, check_libcst),
    ]
    assert tuple(case.key for case in all_cases) == CASE_KEYS
    return {case.key: case for case in all_cases}


def report(all_cases: Dict[str, Case], repeats: int) -> None:
    print(f"\n{'case':<58} {'budget':>8} {'best':>8} {'CPU':>8}  runs (s)                  verdict")
    for case in all_cases.values():
        budget = f"{case.budget:.1f} s" if case.budget is not None else "-"
        runs = " ".join(f"{t:.2f}" for t in case.times)
        if len(case.times) < repeats:
            runs += f" (stopped after {len(case.times)})"
        verdict = "" if case.budget is None else ("ok" if case.best <= case.budget else "OVER")
        cpu = case.cpu[case.times.index(case.best)]
        print(f"{case.label:<58} {budget:>8} {case.best:>6.2f} s {cpu:>6.2f} s  {runs:<25} {verdict}")
    if "c-j2" in all_cases and "d" in all_cases:
        ratio = all_cases["c-j2"].best / all_cases["d"].best
        print(f"\nratio c (-j2) / d (libcst RenameCommand, -j 2): {ratio:.2f}")
    if "c-j2" in all_cases and "c-j1" in all_cases:
        print(f"speed-up -j2 over -j1: {all_cases['c-j1'].best / all_cases['c-j2'].best:.2f}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller corpora, one run each, no budgets")
    parser.add_argument("--repeats", type=int, default=3, help="runs per case; the best is kept (default 3)")
    parser.add_argument("--case-seconds", type=float, default=120.0,
                        help="stop repeating a case once its runs add up to this (default 120)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory and print its path")
    parser.add_argument("--cases", default="",
                        help=f"comma-separated keys of the cases to run: {', '.join(CASE_KEYS)} (default: all)")
    args = parser.parse_args(argv)
    wanted = [key.strip() for key in args.cases.split(",") if key.strip()]
    unknown = set(wanted) - set(CASE_KEYS)
    if unknown:
        parser.error(f"unknown case(s) {', '.join(sorted(unknown))}: choose among {', '.join(CASE_KEYS)}")
    sizes = QUICK if args.quick else FULL
    repeats = 1 if args.quick else args.repeats
    for key, value in _machine.machine().items():
        print(f"{key:<11} {value}")
    scratch = tempfile.mkdtemp(prefix="air-migrate-bench-")
    try:
        built = build_corpora(scratch, sizes)
        all_cases = cases(scratch, sizes, built, args.quick)
        chosen = {key: case for key, case in all_cases.items() if not wanted or key in wanted}
        for case in chosen.values():
            print(f"running {case.label} ...", flush=True)
            run_case(case, scratch, repeats, args.case_seconds)
        if "c-j2" in chosen and "c-j1" in chosen:
            same_result(chosen["c-j2"], chosen["c-j1"])
        report(chosen, repeats)
    except WrongResult as error:
        print(f"\nWRONG RESULT: {error}", file=sys.stderr)
        return 1
    finally:
        if args.keep:
            print(f"scratch directory kept: {scratch}")
        else:
            shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
