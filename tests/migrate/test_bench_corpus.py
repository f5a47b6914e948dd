"""``bench/migrate_speed.py``'s corpora and result checks: seeded, valid, and strict enough that a fast but wrong
run of ``air-migrate`` cannot pass (the timings themselves are never asserted)."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Callable, Dict

import pytest

from air_migrate.cli import main
from air_migrate.sources import read_source

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import migrate_corpus as corpus  # noqa: E402
import migrate_speed as speed  # noqa: E402
import migrate_variants as variants  # noqa: E402


def _tree(root: Path) -> Dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_the_same_seed_gives_the_same_bytes_and_another_seed_other_bytes(tmp_path: Path) -> None:
    corpus.write_plain_files(str(tmp_path / "one"), 8, seed=5, near_miss=2)
    corpus.write_plain_files(str(tmp_path / "two"), 8, seed=5, near_miss=2)
    corpus.write_plain_files(str(tmp_path / "three"), 8, seed=6, near_miss=2)
    assert _tree(tmp_path / "one") == _tree(tmp_path / "two")
    assert _tree(tmp_path / "one") != _tree(tmp_path / "three")
    assert corpus.notebook_cells(30, seed=1) == corpus.notebook_cells(30, seed=1)


def test_plain_files_have_nothing_to_migrate_and_the_asked_number_of_near_misses(tmp_path: Path) -> None:
    paths = corpus.write_plain_files(str(tmp_path), 40, seed=3, near_miss=4)
    texts = [Path(path).read_text() for path in paths]
    assert len(set(texts)) == 40
    assert not any("serverless_gpu" in text or "gpu_type" in text for text in texts)
    assert sum("num_gpus" in text for text in texts) == 4
    assert all(len(text.splitlines()) >= 25 for text in texts)


def test_matching_files_have_about_the_asked_length_and_their_decorators_counted(tmp_path: Path) -> None:
    files = corpus.write_matching_files(str(tmp_path), 5, lines=500, seed=4)
    forms = set()
    for generated in files:
        text = Path(generated.path).read_text()
        assert 480 <= len(text.splitlines()) <= 650
        assert text.count("gpus=") == generated.decorators >= 2
        forms.add(next(line for line in text.splitlines() if "serverless_gpu" in line))
    assert len(forms) == 5  # every import form, one per file in turn


def test_both_notebook_forms_are_read_by_the_tool_cell_for_cell(tmp_path: Path) -> None:
    cells = corpus.notebook_cells(60, seed=2)
    corpus.write_ipynb(str(tmp_path / "nb.ipynb"), cells)
    corpus.write_databricks(str(tmp_path / "nb.py"), cells)
    notebook = read_source("nb.ipynb", (tmp_path / "nb.ipynb").read_bytes())
    databricks = read_source("nb.py", (tmp_path / "nb.py").read_bytes())
    assert len(notebook.cells) == len(databricks.cells) == 60
    assert sum(cell.decorators for cell in cells) >= 5
    assert {"markdown", "code"} == {cell.kind for cell in cells}
    sources = "\n".join(cell.source for cell in cells)
    for magic in ("%pip install serverless_gpu", "%%time", "%%bash", "%load_ext"):
        assert magic in sources


# --- the checks: they accept a real migration and reject wrong ones ---------------------------------------------
#
# One small migration per corpus, shared by the tests below (each damages its own copy of the result).


@pytest.fixture(scope="module")
def migrated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scratch = tmp_path_factory.mktemp("bench")
    pristine = scratch / "pristine"
    corpus.write_plain_files(str(pristine / "plain"), 6, seed=8, near_miss=2)
    corpus.write_matching_files(str(pristine / "matching"), 2, lines=120, seed=7)
    cells = corpus.notebook_cells(24, seed=9)
    (pristine / "notebooks").mkdir()
    corpus.write_ipynb(str(pristine / "notebooks" / "notebook.ipynb"), cells)
    corpus.write_databricks(str(pristine / "notebooks" / "notebook.py"), cells)
    for name in ("plain", "matching", "notebooks"):
        target = scratch / "result" / name
        shutil.copytree(pristine / name, target)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["--no-progress", str(target)])
        (scratch / f"{name}.run").write_text(json.dumps([code, out.getvalue(), err.getvalue()]))
    return scratch


def _copy_of_result(migrated: Path, name: str, tmp_path: Path) -> speed.Run:
    code, out, err = json.loads((migrated / f"{name}.run").read_text())
    target = tmp_path / name
    shutil.copytree(migrated / "result" / name, target)
    return speed.Run(code, out, err, str(target))


def test_matching_check_accepts_the_migration_and_rejects_a_leftover_or_an_untouched_file(
    migrated: Path, tmp_path: Path
) -> None:
    pristine = migrated / "pristine" / "matching"
    files = [corpus.MatchingFile(str(p), p.read_text().count("gpus=")) for p in sorted(pristine.iterdir())]
    check = speed.check_matching(files, str(migrated), "matching")
    run = _copy_of_result(migrated, "matching", tmp_path)
    check(str(pristine), run)

    one = next(Path(run.target).iterdir())
    good = one.read_text()
    one.write_text(good.replace("num_accelerators=", "gpus=", 1))
    with pytest.raises(speed.WrongResult, match="still has"):
        check(str(pristine), run)
    one.write_bytes((pristine / one.name).read_bytes())
    with pytest.raises(speed.WrongResult, match="did not change"):
        check(str(pristine), run)
    one.write_text(good)
    with pytest.raises(speed.WrongResult, match="exit code 3"):
        check(str(pristine), speed.Run(3, run.stdout, run.stderr, run.target))


def test_unchanged_check_rejects_a_touched_file_and_a_summary_that_misses_files(migrated: Path, tmp_path: Path) -> None:
    pristine = str(migrated / "pristine" / "plain")
    check = speed.check_unchanged(6)
    run = _copy_of_result(migrated, "plain", tmp_path)
    check(pristine, run)
    with pytest.raises(speed.WrongResult, match="does not count 6 files"):
        check(pristine, speed.Run(0, run.stdout, "air-migrate: 5 file(s) scanned", run.target))
    victim = next(Path(run.target).rglob("*.py"))
    victim.write_text(victim.read_text() + "\n")
    with pytest.raises(speed.WrongResult, match="a file changed"):
        check(pristine, run)


@pytest.mark.parametrize(
    "name, make_check, damage",
    [
        ("notebook.ipynb", speed.check_ipynb, lambda text: text.replace("%autoreload 2", "%autoreload 1", 1)),
        ("notebook.ipynb", speed.check_ipynb, lambda text: text.replace("num_accelerators=", "gpus=", 1)),
        ("notebook.py", speed.check_databricks, lambda text: text.replace("# MAGIC %md", "# MAGIC %md-sandbox", 1)),
        ("notebook.py", speed.check_databricks, lambda text: text.replace("databricks.air", "serverless_gpu", 1)),
    ],
)
def test_notebook_checks_accept_the_migration_and_reject_damage(
    migrated: Path, tmp_path: Path, name: str, make_check: Callable, damage: Callable[[str], str]
) -> None:
    check = make_check(corpus.notebook_cells(24, seed=9))
    pristine = str(migrated / "pristine" / "notebooks" / name)
    run = _copy_of_result(migrated, "notebooks", tmp_path)
    run = speed.Run(run.returncode, run.stdout, run.stderr, str(Path(run.target) / name))
    check(pristine, run)
    target = Path(run.target)
    text = target.read_text()
    damaged = damage(text)
    assert damaged != text
    target.write_text(damaged)
    with pytest.raises(speed.WrongResult):
        check(pristine, run)


def test_runs_with_different_reports_are_not_the_same_result(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.py").write_text("x = 1\n")
    one = speed.Case("one", "c-j1", "a", [], speed.check_libcst)
    other = speed.Case("other", "c-j2", "a", [], speed.check_libcst)
    one.last = speed.Run(0, "x.py:1:1: AM101 change\n", "", str(tmp_path / "a"))
    other.last = speed.Run(0, "", "", str(tmp_path / "a"))
    with pytest.raises(speed.WrongResult, match="different reports"):
        speed.same_result(one, other)
    other.last = speed.Run(0, one.last.stdout, "", str(tmp_path / "a"))
    speed.same_result(one, other)


# --- the corpora of other shapes (bench/migrate_variants.py) ----------------------------------------------------


def test_placed_files_reach_the_old_api_in_every_placement_and_every_import_form(tmp_path: Path) -> None:
    files = variants.write_placed_files(str(tmp_path), len(variants.IMPORT_FORMS), lines=300, seed=3)
    texts = [Path(made.path).read_text() for made in files]
    assert (
        variants.write_placed_files(str(tmp_path / "again"), 2, lines=300, seed=3)[0].decorators == files[0].decorators
    )
    for made, text in zip(files, texts):
        assert made.decorators == text.count("gpus=") >= 2
        assert 280 <= len(text.splitlines()) <= 450
    joined = "\n".join(texts)
    for statement, _ in variants.IMPORT_FORMS:
        assert statement in joined
    for placement in (
        "@staticmethod\n    @",
        "\n    @",
        ")(run_",
        ".with_overrides(",
        "(\n    gpus=",
        "from serverless_gpu import distributed as nested",
        "gpu_type=GPUType.",
        "@log_calls\n@",
    ):
        assert placement in joined, placement


def test_sparse_files_hold_one_or_two_uses_among_hundreds_of_statements(tmp_path: Path) -> None:
    for made in variants.write_sparse_files(str(tmp_path), 4, lines=500, seed=2):
        text = Path(made.path).read_text()
        assert 1 <= made.decorators <= 3 and len(text.splitlines()) >= 450


def test_the_varied_notebook_has_uses_in_many_cells_among_magics(tmp_path: Path) -> None:
    cells = variants.varied_notebook_cells(80, seed=4)
    assert len(cells) == 80 and cells == variants.varied_notebook_cells(80, seed=4)
    sources = "\n".join(cell.source for cell in cells)
    assert sum(cell.decorators for cell in cells) >= 6
    for magic in ("%pip install serverless_gpu", "%run ./", "%%capture", "files = !ls", "dbutils.library"):
        assert magic in sources
    corpus.write_ipynb(str(tmp_path / "nb.ipynb"), cells)
    corpus.write_databricks(str(tmp_path / "nb.py"), cells)
    code = main(["--no-progress", str(tmp_path)])
    assert code == 0
    speed.check_ipynb(cells)(str(tmp_path / "nb.ipynb"), speed.Run(0, "", "", str(tmp_path / "nb.ipynb")))


def test_the_big_script_check_wants_every_keyword_renamed_and_the_file_untouched(tmp_path: Path) -> None:
    script = tmp_path / "big.py"
    script.write_text("x = 1\n")
    check = speed.check_big_script(2)
    said = "big.py:1:1: AM102 change gpus= -> num_accelerators=\n" * 2 + "big.py: would change\n"
    check(str(script), speed.Run(1, said, "", str(script)))
    with pytest.raises(speed.WrongResult, match="1 gpus= keywords renamed"):
        check(str(script), speed.Run(1, said.split("\n", 1)[1], "", str(script)))
    with pytest.raises(speed.WrongResult, match="exit code 0"):
        check(str(script), speed.Run(0, said, "", str(script)))


def test_a_notebook_with_saved_outputs_is_read_in_its_layout_and_keeps_its_outputs(tmp_path: Path) -> None:
    cells = variants.varied_notebook_cells(30, seed=5)
    path = tmp_path / "nb.ipynb"
    corpus.write_ipynb(str(path), cells, output_lines=3)
    before = json.loads(path.read_text())["cells"]
    code_cells = [cell for cell in before if cell["cell_type"] == "code"]
    assert code_cells and all(len(cell["outputs"][0]["text"]) == 3 for cell in code_cells)
    read_source(str(path), path.read_bytes())  # its layout is one the tool writes back exactly
    assert main(["--no-progress", str(path)]) == 0
    after = json.loads(path.read_text())["cells"]
    assert [cell.get("outputs") for cell in after] == [cell.get("outputs") for cell in before]


def test_the_peak_memory_wrapper_reports_the_commands_own_peak_and_its_exit_code(tmp_path: Path) -> None:
    out = tmp_path / "peak"
    grow = "b = bytearray(64 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096]); raise SystemExit(3)"
    code = subprocess.call([sys.executable, speed.PEAK_MEMORY, str(out), "--", sys.executable, "-c", grow])
    assert code == 3
    assert 64 * 1024 <= int(out.read_text()) < 1024 * 1024  # KiB: its 64 MiB, not this process's pages
