"""How fast ``air-migrate`` runs on a repository, a notebook and a set of large files, against libcst's own codemod.

What it measures
    Each figure is the wall time of the whole command as a user runs it: a subprocess of ``python -m air_migrate``
    (which is what the ``air-migrate`` script runs) in write mode, from start to exit, interpreter start-up and
    imports included. Before every repetition the corpus is copied afresh (not timed), so every run does the full
    work. ``--repeats`` rounds (default 3), each running every case once in turn; medians are judged, the best is shown
    too; a case whose runs add up to more than ``--case-seconds`` stops repeating. ``--before DIR`` also runs each of
    our cases with older code, interleaved with this code's runs, for before/after figures from the same session.
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

    Other shapes of the same sizes (``bench/migrate_variants.py``), since what costs is where the old API sits:

    b2. a 200-cell notebook whose imports come in several cells and forms and whose decorators sit anywhere (see
        below), among line and cell magics (``%run``, ``%%capture``, ``%env``...), as ``.ipynb`` and Databricks;
    p.  100 files of about 500 lines with 2 to 4 uses each in every placement: a top-level decorated function,
        under and over other decorators, a method, a function inside another, ``distributed(...)(fn)``,
        ``fn.with_overrides(...)``, keywords over several lines, ``GPUType`` members, an import inside a
        function; every import form (star, aliases, the new package with old keywords), several in one file;
        ``-j2``, and the anchor (d) on the same files (``dp``);
    s.  100 sparse files of about 500 lines, the old API in one import and one or two uses, ``-j2``; anchor ``ds``;
    e.  one 3 MB script: corpus (p)'s files made one module, ``--check``, with its peak memory;
    f.  a notebook of 5,360 cells of (b2)'s kind, each code cell with 7 lines of saved output (6 MB), with its
        peak memory; its time per cell against (b2)'s says whether anything grows faster than the notebook.

    Commands run with Python's bytecode cache on (in the scratch directory, filled once before the first round,
    untimed), as an installed package has it: a sandbox that sets ``PYTHONDONTWRITEBYTECODE`` would otherwise make
    every run compile this package again, while libcst's files come compiled from their install.

    Every run is checked, so that a fast but wrong run cannot look good: (a) every file's bytes are unchanged and
    the summary counts every file; (b) the cell count, markdown cells and magic lines are unchanged, and no
    ``serverless_gpu`` import, no ``gpus=`` keyword is left, with one ``num_accelerators=`` per old decorator;
    (c) every file changed and parses, with no ``serverless_gpu`` import or ``gpus=``/``gpu_type=`` keyword left
    and one ``num_accelerators=`` per old decorator, and ``-j1`` and ``-j2`` give the same files and the same report;
    (d) libcst exits 0 and leaves no ``serverless_gpu`` import. (b2), (p) and (s) are checked as (b) and (c); (e)
    must say that the file would change, with one change per old keyword; (f) is checked as (b).

    A corpus of many files and its anchor run one after the other in each round (their order swapped every round),
    so that both meet the same load. Peak memory is measured by ``bench/_peak_memory.py``, a small process that
    runs the command (a child forked from this large process would report this process's pages as its own).

    Anchors of issue 31 (``lb``, ``lb2``, ``le``): a fresh process that parses every Python cell of (b), of (b2) in
    each form, and (e)'s script with libcst, nothing more (``bench/_libcst_parse.py``: interpreter start-up and
    ``import libcst`` included, the cells read as ``air-migrate`` reads them). Each is run in turn with its case.

Budgets (issues 5, 16 and 31, on the project's 2-core machines)
    a <= 5 s; b, b2 <= 2 s (each form); c (-j2) <= 30 s; every corpus of 100 files at most 0.3 times its anchor in
    the same run; e <= 20 s and 500 MB; f within 1.25 times (b2)'s time per cell; b, b2 (each form) and e at most
    1.5 times their libcst parse anchor in the same run. Nothing asserts on time: an over-budget case says
    ``over``. The script exits non-zero only when a command fails or a check finds a wrong result.

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
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Callable, Dict, List, Optional, Sequence

import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
import migrate_corpus as corpus
import migrate_variants as variants

SEED = 20261129
OUR_COMMAND = [sys.executable, "-m", "air_migrate"]
LIBCST_COMMAND = [
    sys.executable,
    "-m",
    "libcst.tool",
    "codemod",
    "rename.RenameCommand",
    "-j",
    "2",
    "--no-format",
    "--hide-progress",
    "--old_name",
    "serverless_gpu",
    "--new_name",
    "databricks.air",
]
PARSE_COMMAND = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_libcst_parse.py")]
CASE_KEYS = (
    "a",
    "b-ipynb",
    "b-databricks",
    "b2-ipynb",
    "b2-databricks",
    "c-j2",
    "c-j1",
    "d",
    "p-j2",
    "dp",
    "s-j2",
    "ds",
    "e",
    "f",
    "lb-ipynb",
    "lb-databricks",
    "lb2-ipynb",
    "lb2-databricks",
    "le",
)
ANCHORS = {"c-j2": "d", "p-j2": "dp", "s-j2": "ds"}
"""Each corpus of many files, with the anchor run on the same files."""
PARSE_ANCHORS = {
    "b-ipynb": "lb-ipynb",
    "b-databricks": "lb-databricks",
    "b2-ipynb": "lb2-ipynb",
    "b2-databricks": "lb2-databricks",
    "e": "le",
}
"""Each notebook and the 3 MB script, with a fresh process that only parses its cells with libcst (issue 31)."""
PARSE_BUDGET = 1.5
BIG_SCRIPT_BYTES = 3_000_000
BIG_NOTEBOOK_CELLS = 5360
BIG_NOTEBOOK_OUTPUT_LINES = 7
PER_CELL_BUDGET = 1.25
"""How many times (b2)'s time per cell the 5,360-cell notebook may take per cell."""
PEAK_MEMORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_peak_memory.py")
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
QUICK_BIG_SCRIPT_BYTES = 300_000


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
    memory_budget: Optional[float] = None
    """MB of peak resident memory (of the command's largest process)."""
    times: List[float] = dataclasses.field(default_factory=list)
    cpu: List[float] = dataclasses.field(default_factory=list)
    """CPU seconds (user + system) of each run, its worker processes included."""
    memory: List[float] = dataclasses.field(default_factory=list)
    """Peak resident MB of each run (the largest of the command's processes)."""
    env: Optional[Dict[str, str]] = None
    """The command's environment (``None``: this one's)."""
    last: Optional["Run"] = None

    @property
    def best(self) -> float:
        return min(self.times)

    @property
    def median(self) -> float:
        return statistics.median(self.times)


@dataclasses.dataclass(frozen=True)
class Run:
    returncode: int
    stdout: str
    stderr: str
    target: str
    """Path of the migrated copy."""


def run_rounds(groups: Sequence[Sequence[Case]], scratch: str, repeats: int, case_seconds: float) -> None:
    """``repeats`` rounds, each running every group's cases once, the order inside a group swapped every round (a
    shared machine's load changes by the minute: running the cases in turn lets them meet the same load, which is
    what makes a ratio between them mean something). A case whose runs add up to ``case_seconds`` stops there."""
    for repeat in range(repeats):
        for group in groups:
            for case in group if repeat % 2 == 0 else list(reversed(group)):
                if sum(case.times) > case_seconds:
                    continue
                print(f"  round {repeat + 1}: {case.label} ...", flush=True)
                run_once(case, scratch)


def installed_environment(scratch: str) -> Dict[str, str]:
    """The environment every command runs in: Python's bytecode cache on, in the scratch directory, as an installed
    package has it (pip compiles it at install). With ``PYTHONDONTWRITEBYTECODE`` set, as in some sandboxes, every
    run would compile this package's modules again while libcst's, installed, would not: a cost no user pays."""
    env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = os.path.join(scratch, "pycache")
    return env


def warm_up(env: Dict[str, str]) -> None:
    """Fill the bytecode cache once, untimed."""
    subprocess.run(
        [sys.executable, "-c", "import air_migrate.cli, libcst.tool, libcst.codemod.commands.rename"],
        env=env,
        check=True,
    )


def run_once(case: Case, scratch: str) -> None:
    """One timed run of ``case`` on a fresh copy of its corpus, checked."""
    pristine = os.path.join(scratch, "pristine", case.corpus)
    work = os.path.join(scratch, "work")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    target = os.path.join(work, case.corpus)
    if os.path.isdir(pristine):
        shutil.copytree(pristine, target)
    else:
        shutil.copy2(pristine, target)
    shutil.copy2(os.path.join(scratch, ".libcst.codemod.yaml"), work)
    peak = os.path.join(scratch, "peak-memory")
    with open(os.path.join(scratch, "stdout"), "w+") as out, open(os.path.join(scratch, "stderr"), "w+") as err:
        start = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, PEAK_MEMORY, peak, "--", *case.command, case.corpus],
            cwd=work,
            stdout=out,
            stderr=err,
            env=case.env or installed_environment(scratch),
        )
        _, status, usage = os.wait4(process.pid, 0)  # this command's own usage, its workers included
        elapsed = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        run = Run(process.returncode, out.read(), err.read(), target)
    case.check(pristine, run)
    case.times.append(elapsed)
    case.cpu.append(usage.ru_utime + usage.ru_stime)
    with open(peak) as stream:
        case.memory.append(int(stream.read()) / 1024)
    # Keep the migrated tree of the last run for comparisons between cases.
    kept = os.path.join(scratch, "result", case.key)
    os.makedirs(os.path.dirname(kept), exist_ok=True)
    shutil.rmtree(kept, ignore_errors=True)
    shutil.move(target, kept)
    case.last = dataclasses.replace(run, target=kept)


def before_twin(case: Case, code: str) -> Case:
    """``case`` run with the code under ``code`` (an ``air_migrate`` package there) first on the path."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [code, os.environ.get("PYTHONPATH")])))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return dataclasses.replace(
        case, key=case.key + "@before", label=case.label + " [before]", env=env, times=[], cpu=[], memory=[], last=None
    )


# --- checks -----------------------------------------------------------------------------------------------------


def _expect_exit(run: Run, code: int, what: str) -> None:
    if run.returncode != code:
        raise WrongResult(f"{what}: exit code {run.returncode}, expected {code}\nstderr (end):\n{run.stderr[-2000:]}")


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


def check_matching(files: Sequence[object], scratch: str, name: str) -> Callable[[str, Run], None]:
    """Every file changed, parses, has no old import or keyword left, and one ``num_accelerators=`` per old
    decorator (``files`` are :class:`migrate_corpus.MatchingFile` or :class:`migrate_variants.VariedFile`)."""
    decorators = {
        os.path.relpath(f.path, os.path.join(scratch, "pristine", name)): f.decorators  # type: ignore
        for f in files
    }

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
                raise WrongResult(
                    f"matching corpus: {name} has {text.count('num_accelerators=')} "
                    f"num_accelerators=, expected {decorators[name]}"
                )

    return check


def check_big_script(uses: int) -> Callable[[str, Run], None]:
    def check(pristine: str, run: Run) -> None:
        _expect_exit(run, 1, "3 MB script, --check")
        with open(pristine, "rb") as stream, open(run.target, "rb") as copy:
            if stream.read() != copy.read():
                raise WrongResult("3 MB script: --check changed the file")
        if not run.stdout.rstrip().endswith("would change"):
            raise WrongResult(f"3 MB script: not said to change:\n{run.stdout[-2000:]}")
        renamed = run.stdout.count("AM102 change gpus= -> num_accelerators=")
        if renamed != uses:
            raise WrongResult(f"3 MB script: {renamed} gpus= keywords renamed, expected {uses}")

    return check


def check_libcst(pristine: str, run: Run) -> None:
    _expect_exit(run, 0, "libcst RenameCommand")
    for name, data in _files(run.target).items():
        text = data.decode("utf-8")
        if any(not item.endswith("=") for item in _old_imports_and_keywords(text)):
            raise WrongResult(f"libcst RenameCommand left a serverless_gpu import in {name}")


def check_parsed(pristine: str, run: Run) -> None:
    _expect_exit(run, 0, "libcst parse")
    if not re.match(r"[1-9]\d* cell\(s\) parsed", run.stdout):
        raise WrongResult(f"libcst parse: no cell parsed:\n{run.stdout[-2000:]}{run.stderr[-2000:]}")


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
    varied_cells = variants.varied_notebook_cells(sizes.cells, SEED + 3)
    corpus.write_ipynb(os.path.join(pristine, "varied.ipynb"), varied_cells)
    corpus.write_databricks(os.path.join(pristine, "varied.py"), varied_cells)
    placed = variants.write_placed_files(
        os.path.join(pristine, "placed"), sizes.matching_files, sizes.matching_lines, SEED + 4
    )
    sparse = variants.write_sparse_files(
        os.path.join(pristine, "sparse"), sizes.matching_files, sizes.matching_lines, SEED + 5
    )
    big_uses = _write_big_script(os.path.join(pristine, "big.py"), sizes, SEED + 6)
    big_cells = variants.varied_notebook_cells(BIG_NOTEBOOK_CELLS // (10 if sizes is QUICK else 1), SEED + 7)
    corpus.write_ipynb(os.path.join(pristine, "big.ipynb"), big_cells, BIG_NOTEBOOK_OUTPUT_LINES)
    subprocess.run(
        [sys.executable, "-m", "libcst.tool", "initialize", "."], cwd=scratch, check=True, stdout=subprocess.DEVNULL
    )
    return {
        "matching": matching,
        "cells": cells,
        "varied_cells": varied_cells,
        "placed": placed,
        "sparse": sparse,
        "big_uses": big_uses,
        "big_cells": big_cells,
    }


def _write_big_script(path: str, sizes: Sizes, seed: int) -> int:
    """Corpus (p)'s kind of files made one module of about 3 MB; returns how many ``gpus=`` it holds."""
    target = QUICK_BIG_SCRIPT_BYTES if sizes is QUICK else BIG_SCRIPT_BYTES
    scratch = tempfile.mkdtemp(prefix="big-script-")
    try:
        files = variants.write_placed_files(scratch, 1 + target // 17_000, sizes.matching_lines, seed)
        texts = []
        for made in files:
            with open(made.path, encoding="utf-8") as stream:
                texts.append(stream.read())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    text = "\n\n".join(texts)
    ast.parse(text)
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(text)
    return sum(made.decorators for made in files)


def cases(scratch: str, sizes: Sizes, built: Dict[str, object], quick: bool) -> Dict[str, Case]:
    matching: List[corpus.MatchingFile] = built["matching"]  # type: ignore[assignment]
    cells: List[corpus.NotebookCell] = built["cells"]  # type: ignore[assignment]
    varied_cells: List[corpus.NotebookCell] = built["varied_cells"]  # type: ignore[assignment]
    placed: List[variants.VariedFile] = built["placed"]  # type: ignore[assignment]
    sparse: List[variants.VariedFile] = built["sparse"]  # type: ignore[assignment]
    lines = sizes.matching_lines
    count = sizes.matching_files

    def budget(seconds: float) -> Optional[float]:
        return None if quick else seconds  # a quick run's corpora are smaller: its times are not judged

    all_cases = [
        Case(
            "a",
            f"a. {sizes.plain_files:,} files, no match ({sizes.near_misses} mention gpus)",
            "plain",
            OUR_COMMAND,
            check_unchanged(sizes.plain_files),
            budget(5.0),
        ),
        Case(
            "b-ipynb",
            f"b. {sizes.cells}-cell .ipynb with matches",
            "notebook.ipynb",
            OUR_COMMAND,
            check_ipynb(cells),
            budget(2.0),
        ),
        Case(
            "b-databricks",
            "b. same cells as a Databricks .py source",
            "notebook.py",
            OUR_COMMAND,
            check_databricks(cells),
            budget(2.0),
        ),
        Case(
            "b2-ipynb",
            f"b2. {sizes.cells}-cell .ipynb, uses anywhere, more magics",
            "varied.ipynb",
            OUR_COMMAND,
            check_ipynb(varied_cells),
            budget(2.0),
        ),
        Case(
            "b2-databricks",
            "b2. same cells as a Databricks .py source",
            "varied.py",
            OUR_COMMAND,
            check_databricks(varied_cells),
            budget(2.0),
        ),
        Case(
            "c-j2",
            f"c. {sizes.matching_files} matching files x ~{lines} lines, -j2",
            "matching",
            [*OUR_COMMAND, "-j2"],
            check_matching(matching, scratch, "matching"),
            budget(30.0),
        ),
        Case(
            "c-j1",
            "c. same, -j1 (reference)",
            "matching",
            [*OUR_COMMAND, "-j1"],
            check_matching(matching, scratch, "matching"),
        ),
        Case("d", "d. anchor: libcst RenameCommand on (c), -j 2", "matching", LIBCST_COMMAND, check_libcst),
        Case(
            "p-j2",
            f"p. {count} files x ~{lines} lines, uses anywhere, -j2",
            "placed",
            [*OUR_COMMAND, "-j2"],
            check_matching(placed, scratch, "placed"),
        ),
        Case("dp", "dp. anchor: libcst RenameCommand on (p), -j 2", "placed", LIBCST_COMMAND, check_libcst),
        Case(
            "s-j2",
            f"s. {count} sparse files x ~{lines} lines, -j2",
            "sparse",
            [*OUR_COMMAND, "-j2"],
            check_matching(sparse, scratch, "sparse"),
        ),
        Case("ds", "ds. anchor: libcst RenameCommand on (s), -j 2", "sparse", LIBCST_COMMAND, check_libcst),
        Case(
            "e",
            "e. one 3 MB script of (p)'s code, --check",
            "big.py",
            [*OUR_COMMAND, "--check"],
            check_big_script(built["big_uses"]),
            budget(20.0),  # type: ignore[arg-type]
            memory_budget=None if quick else 500.0,
        ),
        Case(
            "f",
            f"f. {len(built['big_cells']):,}-cell .ipynb of (b2)'s cells, with outputs",  # type: ignore
            "big.ipynb",
            OUR_COMMAND,
            check_ipynb(built["big_cells"]),
        ),  # type: ignore[arg-type]
        Case(
            "lb-ipynb",
            "lb. anchor: libcst parses every cell of (b), .ipynb",
            "notebook.ipynb",
            PARSE_COMMAND,
            check_parsed,
        ),
        Case("lb-databricks", "lb. anchor: the same, Databricks source", "notebook.py", PARSE_COMMAND, check_parsed),
        Case(
            "lb2-ipynb",
            "lb2. anchor: libcst parses every cell of (b2), .ipynb",
            "varied.ipynb",
            PARSE_COMMAND,
            check_parsed,
        ),
        Case("lb2-databricks", "lb2. anchor: the same, Databricks source", "varied.py", PARSE_COMMAND, check_parsed),
        Case("le", "le. anchor: libcst parses (e)'s 3 MB script", "big.py", PARSE_COMMAND, check_parsed),
    ]
    assert tuple(case.key for case in all_cases) == CASE_KEYS
    return {case.key: case for case in all_cases}


def report(all_cases: Dict[str, Case], repeats: int) -> None:
    print(
        f"\n{'case':<66} {'budget':>8} {'median':>8} {'best':>8} {'CPU':>8} {'memory':>8}  runs (s)"
        "                  verdict"
    )
    for case in all_cases.values():
        budget = f"{case.budget:.1f} s" if case.budget is not None else "-"
        runs = " ".join(f"{t:.2f}" for t in case.times)
        if len(case.times) < repeats:
            runs += f" (stopped after {len(case.times)})"
        best = case.times.index(case.best)
        over = (case.budget is not None and case.median > case.budget) or (
            case.memory_budget is not None and case.memory[best] > case.memory_budget
        )
        verdict = "" if case.budget is None and case.memory_budget is None else ("OVER" if over else "ok")
        print(
            f"{case.label:<66} {budget:>8} {case.median:>6.2f} s {case.best:>6.2f} s {case.cpu[best]:>6.2f} s "
            f"{case.memory[best]:>5.0f} MB  {runs:<25} {verdict}"
        )
    print()
    for ours, anchor in [*ANCHORS.items(), *((f"{key}@before", value) for key, value in ANCHORS.items())]:
        if ours in all_cases and anchor in all_cases:
            ratio = all_cases[ours].median / all_cases[anchor].median
            cpu = statistics.median(all_cases[ours].cpu) / statistics.median(all_cases[anchor].cpu)
            verdict = "ok" if ratio <= 0.3 else "OVER"
            print(
                f"ratio {ours} / {anchor} (libcst RenameCommand, -j 2, same files; medians): {ratio:.2f} wall, "
                f"{cpu:.2f} CPU (budget 0.30: {verdict})"
            )
    for ours, anchor in [*PARSE_ANCHORS.items(), *((f"{key}@before", value) for key, value in PARSE_ANCHORS.items())]:
        if ours in all_cases and anchor in all_cases:
            ratio = all_cases[ours].median / all_cases[anchor].median
            cpu = statistics.median(all_cases[ours].cpu) / statistics.median(all_cases[anchor].cpu)
            verdict = "ok" if ratio <= PARSE_BUDGET else "OVER"
            print(
                f"ratio {ours} / {anchor} (a fresh process parsing the same cells with libcst; medians): "
                f"{ratio:.2f} wall, {cpu:.2f} CPU (budget {PARSE_BUDGET:.2f}: {verdict})"
            )
    if "c-j2" in all_cases and "c-j1" in all_cases:
        print(f"speed-up -j2 over -j1: {all_cases['c-j1'].median / all_cases['c-j2'].median:.2f}")
    if "f" in all_cases and "b2-ipynb" in all_cases:
        small, big = all_cases["b2-ipynb"], all_cases["f"]
        cells = BIG_NOTEBOOK_CELLS / 200
        ratio = big.median / small.median / cells
        cpu = statistics.median(big.cpu) / statistics.median(small.cpu) / cells
        verdict = "ok" if ratio <= PER_CELL_BUDGET else "OVER"
        print(
            f"time per cell, f / b2-ipynb (medians): {ratio:.2f} wall, {cpu:.2f} CPU (budget "
            f"{PER_CELL_BUDGET:.2f}: {verdict})"
        )


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="10x smaller corpora, one run each, no budgets")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per case; the median is judged, the best shown too (default 3)"
    )
    parser.add_argument(
        "--case-seconds",
        type=float,
        default=120.0,
        help="stop repeating a case once its runs add up to this (default 120)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory and print its path")
    parser.add_argument(
        "--cases", default="", help=f"comma-separated keys of the cases to run: {', '.join(CASE_KEYS)} (default: all)"
    )
    parser.add_argument(
        "--before",
        metavar="DIR",
        help="also run each air-migrate case with the code in DIR (a folder holding an air_migrate "
        "package, e.g. an older commit's codemods/ copied as DIR/air_migrate), interleaved "
        "with this code's runs; figures are medians",
    )
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
        pairs = {**ANCHORS, **PARSE_ANCHORS}
        paired = {key for pair in pairs.items() for key in pair if set(pair) <= set(chosen)}
        groups = [[case] for key, case in chosen.items() if key not in paired]
        groups += [[chosen[ours], chosen[anchor]] for ours, anchor in pairs.items() if ours in paired]
        if args.before:
            code = os.path.abspath(args.before)
            groups = [
                [
                    each
                    for case in group
                    for each in ([before_twin(case, code), case] if case.command[:3] == OUR_COMMAND else [case])
                ]
                for group in groups
            ]
        warm_up(installed_environment(scratch))
        run_rounds(groups, scratch, repeats, args.case_seconds)
        chosen = {case.key: case for group in groups for case in group}
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
