"""Connecting to Ray: ``ray_init``'s defaults, the dashboard line, and clear errors without Ray or without a cluster."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Dict, List

import pytest

from databricks.air import _notebook, distributed, ray_init, ray_launch
from databricks.air._ray import session
from databricks.air.exceptions import RayConnectionError, RuntimeConfigurationError
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
    assert html.data == ('Ray dashboard: <a href="http://127.0.0.1:8265" target="_blank">http://127.0.0.1:8265</a>')


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


@pytest.mark.slow
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


def test_a_local_instance_is_kept_on_loopback_in_a_private_folder(
    ray_init_calls: List[Dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("RAY_TMPDIR", raising=False)  # the test cluster's: a user's own choice is kept
    ray_init()
    ray_init(address="local")
    for call in ray_init_calls:
        assert call["_node_ip_address"] == "127.0.0.1"
        parent = Path(call["_temp_dir"]).parent
        assert parent.stat().st_uid == os.getuid() and parent.stat().st_mode & 0o777 == 0o700


def test_an_address_or_a_node_ip_address_of_the_callers_is_left_alone(
    ray_init_calls: List[Dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(session, "check_reachable", lambda *_: None)
    ray_init(address="10.1.2.3:6379")
    ray_init(_node_ip_address="10.1.2.3", _temp_dir="/tmp/mine")
    first, second = ray_init_calls
    assert "_node_ip_address" not in first and "_temp_dir" not in first
    assert second["_node_ip_address"] == "10.1.2.3" and second["_temp_dir"] == "/tmp/mine"


def test_a_private_folder_that_is_a_link_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    short = tempfile.mkdtemp(prefix="rp", dir="/tmp")
    try:
        monkeypatch.setattr(tempfile, "tempdir", short)
        os.symlink("/", os.path.join(short, f"databricks-air-{os.getuid()}"))
        with pytest.raises(RuntimeConfigurationError, match="not a folder of this user's"):
            session.private_folder()
    finally:
        shutil.rmtree(short)


LISTENERS_OF_A_LOCAL_INSTANCE = textwrap.dedent(
    """
    import json, os, stat, psutil, ray
    from databricks.air.ray import ray_init

    ray_init(runtime_env={"working_dir": None}, num_cpus=1, include_dashboard=False)
    assert ray.get(ray.remote(lambda: ray.util.get_node_ip_address()).remote()) == "127.0.0.1"
    folder = os.environ["TMPDIR"]
    ours = {p.pid: p.name() for p in psutil.process_iter(["cmdline"]) if folder in " ".join(p.info["cmdline"] or [])}
    ours[os.getpid()] = "driver"
    listening = sorted({(ours[c.pid], c.laddr.ip) for c in psutil.net_connections("inet")
                        if c.status == psutil.CONN_LISTEN and c.pid in ours})
    parent = os.path.join(folder, f"databricks-air-{os.getuid()}")
    print(json.dumps({"listening": listening, "mode": stat.S_IMODE(os.stat(parent).st_mode),
                      "sessions": os.listdir(os.path.join(parent, "ray"))}))
    ray.shutdown()
    """
)


@pytest.mark.slow
def test_a_local_instance_listens_on_loopback_only() -> None:
    """A real Ray instance started by ``ray_init()``, without the loopback settings the test cluster uses: every
    listening socket of its processes is on 127.0.0.1 (read with psutil; nothing connects elsewhere)."""
    import shutil
    import tempfile

    short = tempfile.mkdtemp(prefix="rl", dir="/tmp")  # Ray's socket paths must stay under 107 bytes
    environ = {k: v for k, v in os.environ.items() if k not in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_TMPDIR")}
    environ.update(TMPDIR=short, RAY_USAGE_STATS_ENABLED="0", RAY_AUTH_MODE="disabled")
    try:
        done = subprocess.run(
            [sys.executable, "-c", LISTENERS_OF_A_LOCAL_INSTANCE],
            env=environ,
            text=True,
            capture_output=True,
            timeout=240,
        )
    finally:
        shutil.rmtree(short, ignore_errors=True)
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    found = json.loads(done.stdout.strip().splitlines()[-1])
    names = {name for name, _ in found["listening"]}
    assert {"gcs_server", "raylet"} <= names, found
    assert {address for _, address in found["listening"]} <= {"127.0.0.1", "::ffff:127.0.0.1"}, found
    assert found["mode"] == 0o700 and any(name.startswith("session_") for name in found["sessions"])
