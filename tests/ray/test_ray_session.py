"""Connecting to Ray: ``ray_init``'s defaults, the dashboard line, and clear errors without Ray or without a cluster."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from databricks.air import _notebook, distributed, ray_init, ray_launch
from databricks.air._ray import session
from databricks.air.exceptions import RayConnectionError
from ray_test_support import free_port


def test_ray_is_imported_only_when_a_ray_feature_is_used() -> None:
    code = (
        "import sys, databricks.air.ray, databricks.air.launcher; from databricks.air import ray_launch; "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_without_ray_every_ray_feature_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # what an environment without Ray looks like to `import ray`
    for use in (
        lambda: ray_init(),
        lambda: ray_launch(num_accelerators=2, accelerator_type="CPU"),
        lambda: distributed(num_accelerators=2, accelerator_type="CPU", remote=True)(print),
    ):
        with pytest.raises(ImportError, match=r'pip install "ray\[default\]>=2.40"'):
            use()


def test_a_remote_call_without_a_cluster_says_how_to_name_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)  # as in a fresh notebook
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    function = distributed(num_accelerators=2, accelerator_type="CPU", remote=True)(print)
    with pytest.raises(RayConnectionError) as caught:
        function.distributed()
    assert "RAY_ADDRESS" in str(caught.value) and "ray_init" in str(caught.value)


def test_an_address_that_does_not_answer_fails_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    import ray

    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    closed = free_port()
    monkeypatch.setenv("RAY_ADDRESS", f"127.0.0.1:{closed}")
    function = distributed(num_accelerators=2, accelerator_type="CPU", remote=True)(print)
    started = time.monotonic()
    with pytest.raises(RayConnectionError, match=rf"no Ray cluster answers at 127.0.0.1:{closed} \(from RAY_ADDRESS\)"):
        function.distributed()
    assert time.monotonic() - started < 10  # Ray itself retries for minutes
    with pytest.raises(RayConnectionError, match="ray_init"):
        ray_init(address=f"ray://127.0.0.1:{closed}")


@pytest.fixture
def ray_init_calls(monkeypatch: pytest.MonkeyPatch) -> List[Dict[str, Any]]:
    """``ray.init`` replaced by a recorder that returns a context with a dashboard address."""
    import ray

    calls: List[Dict[str, Any]] = []

    class Context:
        dashboard_url = "127.0.0.1:8265"

    def record(*args: Any, **kwargs: Any) -> Context:
        calls.append({"args": args, **kwargs})
        return Context()

    monkeypatch.setattr(ray, "init", record)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return calls


def test_ray_init_ships_the_working_directory_and_keeps_the_dashboard_on_loopback(
    ray_init_calls: List[Dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    context = ray_init(runtime_env={"env_vars": {"A": "1"}}, num_cpus=2)
    (call,) = ray_init_calls
    assert call["dashboard_host"] == "127.0.0.1" and call["include_dashboard"] is True
    assert call["runtime_env"] == {"env_vars": {"A": "1"}, "working_dir": str(tmp_path)}
    assert call["num_cpus"] == 2
    assert context.dashboard_url == "127.0.0.1:8265"
    assert call["logging_level"] == logging.WARNING  # Ray's INFO lines are its own business
    err = capsys.readouterr().err
    assert err.count("databricks.air: Ray dashboard: http://127.0.0.1:8265") == 1
    assert err.count(f"databricks.air: the working directory {tmp_path} goes to every node of the Ray cluster") == 1


def test_ray_init_keeps_what_the_caller_chose(ray_init_calls: List[Dict[str, Any]]) -> None:
    ray_init(dashboard_host="0.0.0.0", runtime_env={"working_dir": "s3://bucket/code.zip"})
    ray_init(runtime_env={"working_dir": None, "pip": ["requests"]}, logging_level=logging.INFO)
    first, second = ray_init_calls
    assert first["dashboard_host"] == "0.0.0.0"
    assert second["logging_level"] == logging.INFO
    assert first["runtime_env"] == {"working_dir": "s3://bucket/code.zip"}
    assert second["runtime_env"] == {"pip": ["requests"]}  # None: ship nothing


def test_the_dashboard_is_a_link_in_jupyter(monkeypatch: pytest.MonkeyPatch) -> None:
    import IPython.display

    shown: List[Any] = []
    monkeypatch.setattr(_notebook, "in_jupyter_kernel", lambda: True)
    monkeypatch.setattr(IPython.display, "display", lambda obj, **kw: shown.append(obj))
    session.show_dashboard("127.0.0.1:8265")
    (html,) = shown
    assert html.data == (
        'Ray dashboard: <a href="http://127.0.0.1:8265" target="_blank">http://127.0.0.1:8265</a>'
    )


DRIVER = """
    import os, sys
    from databricks.air import distributed

    @distributed(num_accelerators=2, accelerator_type="CPU", remote=True, timeout=300)
    def where():
        import os
        import local_settings  # next to this script, in its working directory only
        return os.environ["RANK"], local_settings.NAME, os.getcwd() != sys.argv[1]

    print("RESULT", where.distributed())
"""


def test_a_script_connects_to_ray_address_on_its_first_remote_call(connected: Any, tmp_path: Path) -> None:
    (tmp_path / "local_settings.py").write_text("NAME = 'shipped'\n")
    (tmp_path / "driver.py").write_text(textwrap.dedent(DRIVER))
    done = subprocess.run(
        [sys.executable, "driver.py", str(tmp_path)],
        cwd=tmp_path,
        env={**os.environ, "RAY_ADDRESS": connected.address},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert "RESULT [('0', 'shipped', True), ('1', 'shipped', True)]" in done.stdout
    assert done.stderr.count("Ray dashboard: http://127.0.0.1:") == 1
    assert done.stderr.count(f"the working directory {tmp_path} goes to every node") == 1
    assert "INFO" not in done.stderr, done.stderr  # Ray's "Connecting to existing Ray cluster", its packaging
