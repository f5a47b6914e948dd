"""The Ray job's ``pip`` list: local files shipped in the working directory and named where the nodes unpack it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from workload_support import make_wheel

from databricks.air.workloads.backends import ray_package
from databricks.air.workloads.run_state import RunSpec

HERE = "${RAY_RUNTIME_ENV_CREATE_WORKING_DIR}/deps"


def test_local_paths_in_entries_and_requirement_files_name_their_shipped_copies(tmp_path: Path) -> None:
    project, elsewhere = tmp_path / "project", tmp_path / "elsewhere"
    (project / "wheels").mkdir(parents=True)
    elsewhere.mkdir()
    make_wheel(project / "wheels", "inside", "1.0", "")
    outside = make_wheel(elsewhere, "outside", "2.0", "")
    (project / "requirements.txt").write_text("wheels/inside-1.0-py3-none-any.whl\n-r more.txt\nnumpy>=1 # pinned\n")
    (project / "more.txt").write_text(f"{outside}\n")
    entries, shipped, rewritten = ray_package.ship_dependencies(
        ["-r requirements.txt", str(outside), "torch>=2; python_version >= '3.9'"], str(project)
    )
    assert entries == [
        f"-r {HERE}/requirements.txt",
        f"{HERE}/_outside/0/outside-2.0-py3-none-any.whl",
        "torch>=2; python_version >= '3.9'",
    ]  # an entry without a local file is kept as written
    assert shipped == {
        "deps/requirements.txt": str(project / "requirements.txt"),
        "deps/wheels/inside-1.0-py3-none-any.whl": str(project / "wheels" / "inside-1.0-py3-none-any.whl"),
        "deps/more.txt": str(project / "more.txt"),
        "deps/_outside/0/outside-2.0-py3-none-any.whl": str(outside),
    }
    assert rewritten["deps/requirements.txt"].decode().splitlines() == [
        f"{HERE}/wheels/inside-1.0-py3-none-any.whl",
        f"-r {HERE}/more.txt",
        "numpy>=1 # pinned",
    ]
    assert rewritten["deps/more.txt"].decode() == f"{HERE}/_outside/0/outside-2.0-py3-none-any.whl\n"


def test_the_pip_field_changes_when_a_local_file_does(tmp_path: Path) -> None:
    wheel = make_wheel(tmp_path, "pkg", "1.0", "VALUE = 1\n")
    submitted = _spec([wheel.name], tmp_path)
    shipped = dataclasses.replace(submitted, dependencies=[f"{HERE}/{wheel.name}"])
    first = ray_package.pip_field(shipped, submitted)
    assert first is not None and first["packages"][1:] == [f"{HERE}/{wheel.name}"]
    assert first["pip_check"] is False and "--no-input" in first["pip_install_options"]
    make_wheel(tmp_path, "pkg", "1.0", "VALUE = 2\n")  # rebuilt, same name and version
    second = ray_package.pip_field(shipped, submitted)
    assert second is not None and second["packages"][0] != first["packages"][0]
    assert ray_package.pip_field(dataclasses.replace(shipped, dependencies=[]), submitted) is None
    plain = dataclasses.replace(submitted, dependencies=["numpy"])
    assert ray_package.pip_field(plain, plain)["packages"] == ["numpy"]  # no local file, no mark


def _spec(dependencies: list, base_dir: Path) -> RunSpec:
    """A spec with these dependencies; the other fields play no part here."""
    return RunSpec(
        run_id=1,
        backend="ray",
        experiment_name="e",
        run_name="r",
        command="true",
        accelerator_type="CPU",
        num_accelerators=1,
        accelerators="1 x CPU",
        plan={},
        max_retries=0,
        timeout_seconds=None,
        timeout_minutes=None,
        env_variables={},
        secrets={},
        dependencies=dependencies,
        base_dir=str(base_dir),
        has_parameters=False,
        submit_dir=str(base_dir),
        user="u",
        idempotency_key="k",
        code_path=str(base_dir),
    )
