"""The documentation: the site builds strictly, and every code block in it is either run here or says why not.

* ``test_site_builds_strictly``: ``mkdocs build --strict`` (broken links and anchors, pages missing from the nav,
  API docstrings that do not parse are all errors).
* ``test_blocks_follow_the_convention[page]``: every fenced block of every page under ``docs/`` and of
  ``README.md`` is ```` ```python ````/```` ```bash ```` (run), ```` ```text ```` (output), or marked
  ``<!-- not-run: reason -->``; a ```` ```text ```` block that does not follow an executed block (so no run
  checks it) is marked ``<!-- not-checked: reason -->``.
* ``test_page_examples_run[page]``: a page's python and bash blocks run, in page order, in one fresh process with
  its working directory a new temporary folder, CPU ranks and no MLflow tracking (a page may turn it on); skipped
  where a package the page requires (``<!-- requires: ... -->``) is not installed. Then each ```` ```text ```` block
  that shows a block's output is compared with what that block printed (``tests/docs_output.py``: paths, ids and
  times masked).

The convention itself is in ``tests/docs_blocks.py``; the per-page runner in ``tests/docs_runner.py``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Dict, List

import pytest

from docs_blocks import parse_page, read_page
from docs_output import block_outputs, mismatch

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
RUNNER = Path(__file__).resolve().parent / "docs_runner.py"
PAGE_TIMEOUT = 540  # a page takes seconds on an idle machine; the margin is for a machine shared with other work
_OUTPUT_SHOWN = 12000


def _pages() -> List[Path]:
    pages = sorted(path for path in DOCS.rglob("*.md") if "_hooks" not in path.relative_to(DOCS).parts)
    return pages + [ROOT / "README.md"]


def _page_id(path: Path) -> str:
    return str(path.relative_to(ROOT))


PAGES = _pages()
RUNNABLE = [path for path in PAGES if read_page(path).executed_blocks]


def _clean_environment(tmp_path: Path, ray_directory: str) -> Dict[str, str]:
    """What a page's code runs with: the test's environment, CPU ranks, no tracking, nothing of this test run.

    ``RAY_ADDRESS`` goes too: the Ray tests' cluster sets it in this process, and a page starts its own. For the same
    reason ``RAY_TMPDIR`` points at a temporary directory of the page's (short: Ray puts sockets in it): there Ray
    finds no ``ray_current_cluster`` file, which would make ``ray.init()`` join the tests' cluster.
    """
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MLFLOW_", "DATABRICKS_AIR_", "DATABRICKS_INTERNAL_", "PYTEST_"))
        and name not in ("MASTER_ADDR", "MASTER_PORT", "RAY_ADDRESS")
    }
    environ.update(
        {
            "DATABRICKS_AIR_ACCELERATOR_TYPE": "CPU",
            "DATABRICKS_AIR_MLFLOW": "0",
            "DATABRICKS_AIR_TRACKING_HOST": "0",  # a page's tracked call would leave a host running
            # Keeps call logs inside the page's folder rather than the shared temp directory.
            "DATABRICKS_AIR_LOG_DIR": str(tmp_path / "databricks-air-logs"),
            # air run's registry, environments and secrets, rather than the user's ~/.air.
            "DATABRICKS_AIR_HOME": str(tmp_path / "air-home"),
            "PYTHONUNBUFFERED": "1",
            # The reader of /home/me: a page that shows a user name (air list) shows the same on every machine.
            "USER": "me",
            "LOGNAME": "me",
            "RAY_TMPDIR": ray_directory,
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    return environ


@pytest.mark.slow
def test_site_builds_strictly(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout}\n{done.stderr}"
    for page in ("index.html", "api/index.html", "troubleshooting/index.html"):
        assert (tmp_path / "site" / page).is_file(), page
    _check_api_pages(tmp_path / "site" / "api")


def _check_api_pages(api: Path) -> None:
    """The API pages show what users write and read: the import path, defaults by value, no private names."""
    import html
    import re

    signatures = {
        page.parent.name: [
            " ".join(html.unescape(re.sub(r"<[^>]+>", "", s)).split())
            for s in re.findall(r'<div class="doc-signature[^"]*">(.*?)</div>', page.read_text(), re.S)
        ]
        for page in api.rglob("index.html")
    }
    # A signature too long for one line is shown one parameter a line: read it as one line.
    signatures = {name: [s.replace("( ", "(").replace(", )", ")") for s in found] for name, found in signatures.items()}
    shown = "\n".join(s for page in signatures.values() for s in page)
    assert "DEFAULT_TIMEOUT" not in shown and "_UNSET" not in shown
    index = (api / "index.html").read_text()
    assert 'id="databricks.air.distributed"' in index and 'id="databricks.air.launcher.distributed"' not in index
    (decorator,) = [s for s in signatures["api"] if s.startswith("distributed(num_accelerators")]
    assert "timeout: Optional[Union[int, float]] = 10800" in decorator
    assert decorator.index("num_accelerators") < decorator.index("gpus:")  # the current names first
    assert any("timeout: Any = <unchanged>" in s for s in signatures["api"])  # with_overrides
    assert not any(s.startswith("DistributedFunction(gpus") for s in signatures["api"])  # not its old-style init


@pytest.mark.parametrize("page", PAGES, ids=_page_id)
def test_blocks_follow_the_convention(page: Path) -> None:
    problems = read_page(page).problems
    assert not problems, f"{_page_id(page)}:\n" + "\n".join(f"  {problem}" for problem in problems)


@pytest.mark.slow
@pytest.mark.timeout(PAGE_TIMEOUT + 60)
@pytest.mark.parametrize("page", RUNNABLE, ids=_page_id)
def test_page_examples_run(page: Path, tmp_path: Path) -> None:
    parsed = read_page(page)
    for module in parsed.requires:
        pytest.importorskip(module, reason=f"{_page_id(page)} needs {module}")
    work = tmp_path / "work"
    work.mkdir()
    spec = {
        "page": _page_id(page),
        "blocks": [
            {"number": b.number, "line": b.line, "language": b.language, "code": b.code} for b in parsed.executed_blocks
        ],
    }
    blocks_file = tmp_path / "blocks.json"
    blocks_file.write_text(json.dumps(spec))
    ray_directory = tempfile.mkdtemp(prefix="air-docs-ray-")
    try:
        done = subprocess.run(
            [sys.executable, str(RUNNER), str(blocks_file)],
            cwd=work,
            env=_clean_environment(tmp_path, ray_directory),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=PAGE_TIMEOUT,
        )
    except subprocess.TimeoutExpired as expired:
        shutil.rmtree(ray_directory, ignore_errors=True)
        output = expired.stdout.decode(errors="replace") if isinstance(expired.stdout, bytes) else expired.stdout
        started = [line for line in (output or "").splitlines() if line.startswith("======== ")]
        pytest.fail(
            f"{_page_id(page)}: not finished after {PAGE_TIMEOUT} s, in "
            f"{started[-1][9:] if started else 'its first block'}\n\n{_tail(output or '')}"
        )
    shutil.rmtree(ray_directory, ignore_errors=True)
    failed = [line for line in done.stdout.splitlines() if " FAILED: " in line]
    assert done.returncode == 0, f"{failed[0] if failed else _page_id(page)}\n\n{_tail(done.stdout)}"
    wrong = _wrong_outputs(parsed, block_outputs(done.stdout))
    assert not wrong, f"{_page_id(page)}: ```text blocks that do not show what ran:\n\n" + "\n\n".join(wrong)


def _wrong_outputs(parsed, outputs: Dict[int, str]) -> List[str]:
    """A diff for each ```text block of the page that does not match the output of the block it follows."""
    wrong = []
    for block in parsed.blocks:
        source = block.checked_output_of
        if source is None:
            continue
        diff = mismatch(block.code, outputs.get(source, ""))
        if diff is not None:
            wrong.append(f"block {block.number} (line {block.line}), the output of block {source}:\n{diff}")
    return wrong


def _tail(output: str) -> str:
    if len(output) > _OUTPUT_SHOWN:
        return "[... earlier output cut ...]\n" + output[-_OUTPUT_SHOWN:]
    return output


# --- the checker itself ----------------------------------------------------------------------------------------


def _problems(text: str) -> List[str]:
    return parse_page(text).problems


def test_python_bash_and_text_blocks_are_accepted() -> None:
    page = parse_page("# T\n\n```python\nx = 1\n```\n\n```bash\necho hi\n```\n\n```text\nhi\n```\n")
    assert page.problems == []
    assert [(b.language, b.executed) for b in page.blocks] == [("python", True), ("bash", True), ("text", False)]
    assert page.blocks[0].code == "x = 1\n" and page.blocks[0].line == 3


def test_unmarked_block_of_another_language_is_reported() -> None:
    (problem,) = _problems("```sh\npip install x\n```\n")
    assert "block 1 (line 1, ```sh) is neither executed nor marked" in problem


def test_block_without_language_is_reported() -> None:
    (problem,) = _problems("text\n\n```\nsomething\n```\n")
    assert "<no language>" in problem


def test_marker_skips_a_block_and_keeps_its_reason() -> None:
    page = parse_page("<!-- not-run: needs NVIDIA GPUs -->\n```python\nimport torch\ntorch.cuda.init()\n```\n")
    assert page.problems == []
    assert page.blocks[0].not_run_reason == "needs NVIDIA GPUs" and not page.blocks[0].executed
    assert page.executed_blocks == []


def test_marker_may_be_separated_by_blank_lines_only() -> None:
    assert _problems("<!-- not-run: installs packages -->\n\n```sh\npip install x\n```\n") == []
    problems = _problems("<!-- not-run: installs packages -->\nSome prose.\n\n```sh\npip install x\n```\n")
    assert any("not followed by a fenced block" in p for p in problems)
    assert any("neither executed nor marked" in p for p in problems)


@pytest.mark.parametrize("marker", ["<!-- not-run -->", "<!-- not-run: -->", "<!-- not-run:    -->"])
def test_marker_without_reason_is_reported(marker: str) -> None:
    (problem,) = _problems(f"{marker}\n```python\nx = 1\n```\n")
    assert "needs a reason" in problem


def test_marker_at_the_end_of_a_page_is_reported() -> None:
    (problem,) = _problems("```python\nx = 1\n```\n\n<!-- not-run: nothing follows -->\n")
    assert "line 5 is not followed by a fenced block" in problem


def test_a_page_names_the_packages_it_requires() -> None:
    page = parse_page("# T\n\n<!-- requires: transformers, accelerate -->\n\n```python\nimport transformers\n```\n")
    assert page.problems == [] and page.requires == ["transformers", "accelerate"]
    assert parse_page("```python\nx = 1\n```\n").requires == []


def test_unclosed_block_is_reported() -> None:
    (problem,) = _problems("```python\nx = 1\n")
    assert "never closed" in problem


def test_indented_and_nested_fences() -> None:
    text = (
        "!!! note\n\n    ```python\n    x = 1\n    if x:\n        y = 2\n    ```\n\n"
        "````text\n```python\nnot a block of its own\n```\n````\n"
    )
    page = parse_page(text)
    assert page.problems == []
    assert [b.language for b in page.blocks] == ["python", "text"]
    assert page.blocks[0].code == "x = 1\nif x:\n    y = 2\n"
    assert "not a block of its own" in page.blocks[1].code


def test_info_string_attributes_do_not_change_the_language() -> None:
    page = parse_page('```python title="train.py" hl_lines="2"\nx = 1\n```\n')
    assert page.blocks[0].language == "python" and page.problems == []


def test_runner_reports_the_failing_block_and_stops(tmp_path: Path) -> None:
    spec = {
        "page": "docs/x.md",
        "blocks": [
            {"number": 1, "line": 3, "language": "python", "code": "value = 41\n"},
            {"number": 2, "line": 7, "language": "bash", "code": "echo from-bash > made.txt\n"},
            {"number": 3, "line": 11, "language": "python", "code": "assert value == 41\nraise ValueError('boom')\n"},
            {"number": 4, "line": 15, "language": "python", "code": "print('never')\n"},
        ],
    }
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, str(RUNNER), "blocks.json"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert "FAILED: docs/x.md, block 3 (line 11, python)" in done.stdout
    assert "ValueError: boom" in done.stderr and 'File "docs/x.md:block-3", line 2' in done.stderr
    assert "raise ValueError('boom')" in done.stderr  # the block's source line is shown
    assert (tmp_path / "made.txt").read_text() == "from-bash\n"
    assert "never" not in done.stdout


def test_runner_fails_on_a_failing_bash_command(tmp_path: Path) -> None:
    spec = {"page": "p.md", "blocks": [{"number": 1, "line": 1, "language": "bash", "code": "false\necho after\n"}]}
    (tmp_path / "blocks.json").write_text(json.dumps(spec))
    done = subprocess.run(
        [sys.executable, str(RUNNER), "blocks.json"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1 and "after" not in done.stdout
    assert "FAILED: p.md, block 1 (line 1, bash): bash exited with status 1" in done.stdout


# --- the API pages' docstring rewriting ---------------------------------------------------------------------------


def _sphinx_roles():
    spec = importlib.util.spec_from_file_location("sphinx_roles", DOCS / "_hooks" / "sphinx_roles.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def test_roles_become_optional_cross_references() -> None:
    roles = _sphinx_roles()
    known = {"DistributedExecutionError": "databricks.air.exceptions.DistributedExecutionError"}
    text = roles.rewrite_roles(
        "Raises :class:`DistributedExecutionError`, see :func:`~databricks.air.launcher.distributed` "
        "and :class:`RuntimeError`.",
        known.get,
    )
    assert (
        '<autoref identifier="databricks.air.exceptions.DistributedExecutionError" optional>'
        "<code>DistributedExecutionError</code></autoref>" in text
    )
    assert '<autoref identifier="databricks.air.launcher.distributed" optional><code>distributed</code>' in text
    assert '<autoref identifier="RuntimeError" optional><code>RuntimeError</code></autoref>' in text
    assert ":class:" not in text and ":func:" not in text


def test_literal_blocks_become_fenced_python() -> None:
    roles = _sphinx_roles()
    text = "Summary.\n\nExample::\n\n    x = 1\n        y = 2\n\nAfter.\n\nRun this::\n\n    go()\n"
    assert roles.rewrite_literal_blocks(text) == (
        "Summary.\n\n**Example:**\n\n```python\nx = 1\n    y = 2\n```\n\nAfter.\n\nRun this:\n\n```python\ngo()\n```"
    )


def test_docstring_sections_inside_classes_keep_their_indentation() -> None:
    roles = _sphinx_roles()
    text = "Head.\n\n    Call it like this::\n\n        f()\n"
    assert roles.rewrite_literal_blocks(text) == "Head.\n\n    Call it like this:\n\n    ```python\n    f()\n    ```"


# --- the docstring audit ---------------------------------------------------------------------------------------

# The modules users import; each has an API page.
PUBLIC_MODULES = [
    "databricks.air",
    "databricks.air.launcher",
    "databricks.air.compute",
    "databricks.air.exceptions",
    "databricks.air.runtime",
    "databricks.air.utils",
    "databricks.air.ray",
    "databricks.air.data",
]


def _documented_modules() -> List[str]:
    """Modules rendered on an API page: by a ``::: module`` directive, or one for a name in the module."""
    targets = [
        line[4:].strip()
        for page in sorted((DOCS / "api").glob("*.md"))
        for line in page.read_text().splitlines()
        if line.startswith("::: ")
    ]
    return [module for module in PUBLIC_MODULES if any(t.rpartition(".")[0] == module or t == module for t in targets)]


def _public_names(module_name: str) -> List[str]:
    module = importlib.import_module(module_name)
    names = [name for name in getattr(module, "__all__", []) if name != "__version__"]
    if module_name == "databricks.air.launcher":
        names.append("DistributedFunction")  # returned by the decorator, documented on the API page
    return names


def _undocumented(module_name: str) -> List[str]:
    """Public names of ``module_name`` (and public methods and properties of its classes) without a docstring."""
    import enum
    import inspect

    module = importlib.import_module(module_name)
    missing = [] if (module.__doc__ or "").strip() else [module_name]
    for name in _public_names(module_name):
        value = getattr(module, name)
        if not (getattr(value, "__doc__", None) or "").strip():
            missing.append(f"{module_name}.{name}")
        if not inspect.isclass(value):
            continue
        for owner in value.__mro__:
            if not owner.__module__.startswith("databricks.air"):
                continue  # methods inherited from torch or the standard library are documented there
            for attribute, member in vars(owner).items():
                if attribute.startswith("_") or (isinstance(value, enum.EnumMeta) and attribute in value.__members__):
                    continue
                function = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
                if inspect.isfunction(function) and not (inspect.getdoc(getattr(value, attribute)) or "").strip():
                    if not (function.__doc__ or "").strip():
                        missing.append(f"{module_name}.{name}.{attribute}")
    return sorted(set(missing))


@pytest.mark.parametrize("module_name", PUBLIC_MODULES)
def test_public_names_have_docstrings(module_name: str) -> None:
    assert _undocumented(module_name) == []


def test_every_public_module_has_an_api_page() -> None:
    assert sorted(set(PUBLIC_MODULES) - set(_documented_modules())) == []


def test_the_audit_finds_a_missing_docstring(monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.air import runtime

    monkeypatch.setattr(runtime.get_node_ip, "__doc__", None)
    assert _undocumented("databricks.air.runtime") == ["databricks.air.runtime.get_node_ip"]


# --- output blocks against the run ----------------------------------------------------------------------------


def test_a_text_block_right_after_an_executed_block_shows_its_output() -> None:
    page = parse_page(
        "```python\nprint(1)\n```\n\n```text\n1\n```\n\nProse.\n\n<!-- not-checked: quoted from a log -->\n"
        "```text\nnot an output\n```\n\n"
        "```bash\necho 2\n```\n\n<!-- not-checked: ranks race -->\n```text\n2\n```\n"
    )
    assert page.problems == []
    assert [(b.number, b.output_of, b.checked_output_of) for b in page.blocks if b.language == "text"] == [
        (2, 1, 1),
        (3, None, None),
        (5, 4, None),
    ]
    assert page.blocks[4].not_checked_reason == "ranks race"


def test_not_checked_marks_only_a_text_block() -> None:
    (problem,) = _problems("Prose.\n\n<!-- not-checked: why -->\n```python\nx = 1\n```\n")
    assert "block 1 (line 4, ```python): not-checked (line 3) marks a ```text block, not this one" in problem
    (problem,) = _problems("```python\nx = 1\n```\n<!-- not-checked -->\n```text\nx\n```\n")
    assert "needs a reason" in problem


def test_a_text_block_that_no_run_checks_must_say_why() -> None:
    # After prose: no block's output to compare it with.
    (problem,) = _problems("# T\n\nThe error reads:\n\n```text\nValueError: boom\n```\n")
    assert "block 1 (line 5, ```text) follows prose, so no run checks it" in problem
    assert "<!-- not-checked: <reason> -->" in problem
    # After a block that does not run: its output is not produced either.
    text = "<!-- not-run: needs NVIDIA GPUs -->\n```python\nprint(1)\n```\n\n```text\n1\n```\n"
    (problem,) = _problems(text)
    assert "block 2 (line 6, ```text) follows a block that does not run" in problem
    # Said why: accepted, and the reason is kept; after an executed block, no marker is needed.
    marked = parse_page("Prose.\n\n<!-- not-checked: printed on a GPU machine -->\n```text\nGPU 0\n```\n")
    assert marked.problems == [] and marked.blocks[0].not_checked_reason == "printed on a GPU machine"
    assert _problems("```bash\necho 1\n```\n\n```text\n1\n```\n") == []


def test_outputs_are_compared_with_what_varies_masked() -> None:
    shown = (
        "databricks.air: running train on 2 CPU rank(s); logs: /tmp/databricks-air-logs/20261129-101500-train-k2j4\n"
        "MLflow run train (5f0c3b8e6a1d4f0b9a0e2c7d1b3a4e5f) in sqlite:////home/me/mlflow.db; done in 2.5 s\n"
        "2026/11/29 10:15:20 INFO mlflow: tables\n"
        "epoch 0  loss 8.2383\n"
    )
    printed = (
        "databricks.air: running train on 2 CPU rank(s); logs: /tmp/pytest-7/x/databricks-air-logs/20261202-000115-a\n"
        "MLflow run train (f5376a386f5e47999847b1e9f57646cc) in sqlite:////tmp/p/work/mlflow.db; done in 0.31 s\n"
        "2026/12/02 00:01:15 INFO mlflow: tables\n"
        "epoch 0  loss 8.2383\n\n"
    )
    assert mismatch(shown, printed) is None
    diff = mismatch(shown, printed.replace("8.2383", "8.2341"))  # figures are not masked
    assert diff is not None and "-epoch 0  loss 8.2383" in diff and "+epoch 0  loss 8.2341" in diff
    assert mismatch("a\nb\n", "a\nextra line\nb\n") is not None  # every line counts, the library's too


def test_ellipsis_stands_for_text_or_lines_that_vary() -> None:
    assert mismatch("FAILED | rank ... of 2 raised\n", "FAILED | rank 1 of 2 raised\n") is None
    assert mismatch("first\n...\nlast\n", "first\n1\n2\nlast\n") is None
    assert mismatch("first\n...\nlast\n", "first\nlast\n") is None
    assert mismatch("first\n...\nlast\n", "first\n1\n") is not None


def test_block_outputs_split_the_runners_output_by_banner() -> None:
    output = (
        "======== docs/x.md, block 1 (line 3, python)\nhello\n"
        "======== docs/x.md, block 3 (line 9, bash)\nfrom bash\nmore\n"
        "======== FAILED: docs/x.md, block 3 (line 9, bash): bash exited with status 1\n"
    )
    assert block_outputs(output) == {1: "hello\n", 3: "from bash\nmore\n"}
