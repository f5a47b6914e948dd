"""A real two-node Ray cluster on loopback, started once per test session and shared by the Ray tests."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from ray_test_support import CPUS_PER_NODE, SESSION_MARKER, free_port  # sets the loopback variables

pytest.importorskip("ray.cluster_utils")  # not `ray`: this very folder would pass for a namespace package

_OBJECT_STORE_BYTES = 200 * 1024 * 1024
_HERE = Path(__file__).resolve().parent
_shut_down: list = []  # the running session cluster's shut-down, once started


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: Any) -> None:
    """Stop the cluster once the last Ray test has run, not at the end of the session: its idle processes (GCS,
    raylets, dashboard, agents) take CPU that the rest of the suite needs on a 2-core machine."""
    if _shut_down and (nextitem is None or _HERE not in Path(nextitem.path).resolve().parents):
        _shut_down.pop()()


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """Two Ray nodes of 2 CPUs each on 127.0.0.1, the head with a dashboard (and the job submission API); torn down
    at the end of the session.

    Its processes (and so every job, actor and command on it) run on a virtual environment layered on this one
    (:func:`_layered_python`), see it and this interpreter's ``bin`` first on ``PATH``, a ``DATABRICKS_AIR_HOME`` of
    their own and no package index. Each node keeps Ray's runtime environments in a folder of its own, as nodes on
    separate machines do (on one machine they would share the session's, and each would build into the other's).
    """
    import ray
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": "127.0.0.1", "num_cpus": CPUS_PER_NODE, "object_store_memory": _OBJECT_STORE_BYTES}
    # Every port picked free: Ray's defaults (the head's dashboard agent on 52365...) may be another cluster's.
    dashboard = {
        "include_dashboard": True,
        "dashboard_host": "127.0.0.1",
        "dashboard_port": free_port(),
        "dashboard_agent_listen_port": free_port(),
    }
    home = tmp_path_factory.mktemp("cluster-air-home")
    python = _layered_python(home)
    cluster_environment = {
        "PATH": os.pathsep.join(
            [str(Path(python).parent), str(Path(sys.executable).parent), os.environ.get("PATH", "")]
        ),
        "DATABRICKS_AIR_HOME": str(home),
        "PIP_NO_INDEX": "1",
        "RUNTIME_ENV_RETRY_TIMES": "1",  # Ray tries a runtime environment that fails once, not three times
    }
    with pytest.MonkeyPatch.context() as patch:  # the nodes keep the environment they were started with
        for name, value in cluster_environment.items():
            patch.setenv(name, value)
        patch.setattr(sys, "executable", python)  # Ray starts every process of a node with sys.executable
        cluster = Cluster(initialize_head=True, head_node_args={**node, **dashboard})
        try:
            cluster.add_node(**node, runtime_env_dir_name="runtime_resources_node_1")
        except BaseException:
            cluster.shutdown()
            raise

    def shut_down() -> None:
        ray.shutdown()
        cluster.shutdown()

    _shut_down.append(shut_down)
    try:
        cluster.wait_for_nodes()
        yield cluster
    finally:
        if _shut_down:
            _shut_down.pop()()


def _layered_python(home: Path) -> str:
    """The interpreter of a virtual environment with no package of its own that sees every package of this one.

    Ray's ``pip`` runtime environment copies the virtual environment the cluster's Python runs in, for each
    environment on each node: this one's copy is a few files, where the test environment's own (torch...) takes
    minutes and gigabytes. It is the layered environment that ``environment.dependencies`` build on this machine.
    """
    from databricks.air.workloads import environments

    with pytest.MonkeyPatch.context() as patch, open(home / "layered-python.log", "wb") as log:
        patch.setenv("DATABRICKS_AIR_HOME", str(home))
        return os.path.join(environments.prepare([], str(home), log).bin_dir, "python")


@pytest.fixture(scope="session")
def dashboard(ray_cluster: Any) -> str:
    """The session cluster's dashboard: what ``air run --backend ray --address`` and ``ray job submit`` take."""
    return f"http://{ray_cluster.webui_url}"


@pytest.fixture(scope="session")
def connected(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """This process as the cluster's driver, as a notebook is after ``ray_init``.

    Its working directory travels as the job's ``working_dir``: it holds ``air_ray_helper.py``, deleted right after
    connecting, so ranks can import it only from the copy Ray shipped.
    """
    from databricks.air.ray import ray_init

    workdir = tmp_path_factory.mktemp("driver-cwd")
    (workdir / "air_ray_helper.py").write_text("SHIPPED = 'from the working directory'\n")
    before = os.getcwd()
    os.chdir(workdir)
    try:
        ray_init(address=ray_cluster.address, runtime_env={"env_vars": {"AIR_TEST_MARKER": SESSION_MARKER}})
    finally:
        os.chdir(before)
    (workdir / "air_ray_helper.py").unlink()
    return ray_cluster


@pytest.fixture(autouse=True)
def _in_a_temporary_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every test runs from a small directory of its own (a driver it connects ships its working directory)."""
    monkeypatch.chdir(tmp_path)
