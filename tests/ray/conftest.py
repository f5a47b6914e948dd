"""A real two-node Ray cluster on loopback, started once per test session and shared by the Ray tests."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest

from ray_test_support import CPUS_PER_NODE, SESSION_MARKER, free_port  # sets the loopback variables

pytest.importorskip("ray.cluster_utils")  # not `ray`: this very folder would pass for a namespace package

_OBJECT_STORE_BYTES = 200 * 1024 * 1024


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[Any]:
    """Two Ray nodes of 2 CPUs each on 127.0.0.1, the head with a dashboard; torn down at the end of the session."""
    import ray
    from ray.cluster_utils import Cluster

    node = {"node_ip_address": "127.0.0.1", "num_cpus": CPUS_PER_NODE, "object_store_memory": _OBJECT_STORE_BYTES}
    dashboard = {"include_dashboard": True, "dashboard_host": "127.0.0.1", "dashboard_port": free_port()}
    cluster = Cluster(initialize_head=True, head_node_args={**node, **dashboard})
    try:
        cluster.add_node(**node)
        cluster.wait_for_nodes()
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


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
