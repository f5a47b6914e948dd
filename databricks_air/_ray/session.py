"""This process's connection to a Ray cluster: ``ray_init``, connecting on the first remote call, and a Ray job's
entrypoint connecting to the cluster that runs it (:func:`connect_job_driver`).

``ray_init`` is ``ray.init`` with four differences: the caller's working directory travels to every node as the
job's ``runtime_env`` ``working_dir`` (so ``import my_module`` works in ranks on other machines; pass
``runtime_env={"working_dir": None}`` to ship nothing), a dashboard it starts listens on 127.0.0.1 only (Ray's
dashboard accepts job submissions, which run code, from whoever can reach it), a Ray instance it starts on this
machine (no address given) listens on 127.0.0.1 only and keeps its files in a folder only this user can enter
(Ray's GCS, raylet and workers take requests from whoever reaches them, and its session folders are 0777), and the
dashboard's address is shown once, as a link in Jupyter. A remote call in a process that is not connected yet
connects to ``RAY_ADDRESS`` the same
way; an address that does not answer fails at once, instead of after Ray's retries of several minutes.
"""

from __future__ import annotations

import contextlib
import html
import ipaddress
import logging
import os
import socket
from typing import Any, Dict, Iterator, Optional, Tuple

from databricks.air import _notebook
from databricks.air._engine.processes import LOOPBACK
from databricks.air._engine.user_folder import user_folder
from databricks.air._ray.require import import_ray
from databricks.air.exceptions import RayConnectionError, RuntimeConfigurationError
from databricks.air._notices import PREFIX, notice

ADDRESS_VARIABLE = "RAY_ADDRESS"
LOCAL_DASHBOARD_HOST = LOOPBACK
SINGLE_MACHINE_VARIABLE = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
_REACH_SECONDS = 5.0
_CLIENT_SCHEME = "ray://"


def ray_init(*args: Any, **kwargs: Any) -> Any:
    """``ray.init(*args, **kwargs)`` with the defaults above; returns Ray's context."""
    ray = import_ray()
    address = kwargs.get("address", args[0] if args else None) or os.environ.get(ADDRESS_VARIABLE)
    if address:
        check_reachable(str(address), "address" if kwargs.get("address") or args else ADDRESS_VARIABLE)
    starts_local = str(address or "local") == "local" and not kwargs.get("_node_ip_address")
    # A cluster on this machine's loopback (ray_launch's head for the ranks of one machine) is reached there: left
    # alone, Ray would rewrite 127.0.0.1 to the machine's interface address, where nothing of it listens.
    on_loopback = starts_local or _is_loopback_address(str(address or ""))
    if on_loopback and not kwargs.get("_node_ip_address"):
        kwargs["_node_ip_address"] = LOOPBACK  # this driver's node: the one on loopback, not the interface's
    if starts_local:
        if not kwargs.get("_temp_dir") and not os.environ.get("RAY_TMPDIR"):
            kwargs["_temp_dir"] = private_temp_dir()
    if not str(address or "").startswith(_CLIENT_SCHEME):  # Ray Client takes no dashboard arguments
        kwargs.setdefault("include_dashboard", True)
        kwargs.setdefault("dashboard_host", LOCAL_DASHBOARD_HOST)
    runtime_env, working_dir = _with_working_dir(kwargs.get("runtime_env"))
    kwargs["runtime_env"] = runtime_env
    # Ray's INFO lines (the instance it started, the working directory's package: three lines with its hash) are
    # its internals; what a user needs of them is said once below. logging_level=logging.INFO brings them back.
    kwargs.setdefault("logging_level", logging.WARNING)
    try:
        with _without_rays_dashboard_line(), _on_loopback(on_loopback):
            context = ray.init(*args, **kwargs)
    except ValueError as error:
        if working_dir and "exceeds the maximum size" in str(error):
            raise RuntimeConfigurationError(
                f"{error}\ndatabricks.air ships the working directory {working_dir} to the Ray cluster by default; "
                'pass runtime_env={"working_dir": None} to ray_init to ship nothing, or another, smaller directory.'
            ) from error
        raise
    if working_dir:
        notice(
            f"the working directory {working_dir} goes to every node of the Ray cluster (pass "
            'runtime_env={"working_dir": None} to ray_init to ship nothing)'
        )
    show_dashboard(getattr(context, "dashboard_url", None))
    return context


def _is_loopback_address(address: str) -> bool:
    """Whether ``address`` (``HOST:PORT`` of a GCS, not a ``ray://`` client address) is on loopback."""
    return "://" not in address and is_loopback_host(address.rpartition(":")[0])


def is_loopback_host(host: str) -> bool:
    """Whether ``host`` (an address, bracketed or not, or ``localhost``) is this machine's loopback."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def private_temp_dir() -> str:
    """``<temp>/databricks-air-<uid>/ray``: Ray's temp folder for an instance ``ray_init`` starts."""
    return os.path.join(private_folder(), "ray")


def private_folder() -> str:
    """A folder only this user may enter, for Ray's temp folders: Ray makes its own temp folder and every session
    folder 0777, and inside this one nobody else reaches them."""
    return user_folder()


@contextlib.contextmanager
def _on_loopback(local: bool) -> Iterator[None]:
    """While ``ray.init`` starts an instance on this machine: Ray takes 127.0.0.1 as this node's address.

    Left alone, Ray 2.x replaces a given 127.0.0.1 with the machine's interface address, and its servers listen
    there. ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (its setting for single-machine instances, the default on macOS
    and Windows) keeps 127.0.0.1: read from the environment by the processes it starts, and from its constants
    module by this one, which may have imported Ray already.
    """
    if not local:
        yield
        return
    from ray._private import ray_constants

    before_variable = os.environ.get(SINGLE_MACHINE_VARIABLE)
    before_constant = getattr(ray_constants, "ENABLE_RAY_CLUSTER", True)
    os.environ[SINGLE_MACHINE_VARIABLE] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = before_constant
        if before_variable is None:
            os.environ.pop(SINGLE_MACHINE_VARIABLE, None)
        else:
            os.environ[SINGLE_MACHINE_VARIABLE] = before_variable


def ensure_connected() -> None:
    """Connect to ``RAY_ADDRESS`` unless this process already is; a clear error when there is no cluster to reach."""
    ray = import_ray()
    if ray.is_initialized():
        return
    address = os.environ.get(ADDRESS_VARIABLE, "").strip()
    if not address:
        raise RayConnectionError(
            "remote=True runs the ranks on a Ray cluster, and this process is not connected to one. Set "
            f"{ADDRESS_VARIABLE} to the cluster's address (the head's host:port, e.g. 10.0.0.5:6379, or "
            "ray://host:10001), or call databricks.air.ray.ray_init(address=...) first; ray_init() without an "
            "address starts a Ray instance on this machine."
        )
    try:
        ray_init()  # Ray reads RAY_ADDRESS itself
    except ConnectionError as error:
        raise RayConnectionError(
            f"cannot connect to the Ray cluster at {ADDRESS_VARIABLE}={address}: {error}. Check the address, or "
            "call databricks.air.ray.ray_init(...) first."
        ) from error


def connect_job_driver(**options: Any) -> Any:
    """Connect this process, a Ray job's entrypoint, to the cluster that runs the job (Ray tells it where), without
    Ray's INFO lines; ``options`` are ``ray.init``'s. Returns the ``ray`` module (``ray.shutdown()`` disconnects)."""
    ray = import_ray()
    ray.init(logging_level=logging.WARNING, **options)
    return ray


def check_reachable(address: str, source: str) -> None:
    """Fail fast, with what to do, when ``address`` names a host and port that do not accept connections."""
    host_port = _host_and_port(address)
    if host_port is None:
        return
    try:
        socket.create_connection(host_port, timeout=_REACH_SECONDS).close()
    except OSError as error:
        raise RayConnectionError(
            f"no Ray cluster answers at {address} (from {source}): {error}. Start the cluster (`ray start --head` "
            f"on its head node), fix {ADDRESS_VARIABLE}, or call databricks.air.ray.ray_init() with no address to "
            "start a Ray instance on this machine."
        ) from None


def _host_and_port(address: str) -> Optional[Tuple[str, int]]:
    """``(host, port)`` of ``host:port`` or ``ray://host:port``; ``None`` for ``auto``, ``local`` and the like."""
    rest = address.strip()
    if rest.startswith(_CLIENT_SCHEME):
        rest = rest[len(_CLIENT_SCHEME) :]
    rest = rest.split("/", 1)[0]
    host, separator, port = rest.rpartition(":")
    if not separator or not port.isdigit() or not host:
        return None
    return host.strip("[]"), int(port)


def _with_working_dir(runtime_env: Any) -> Tuple[Dict[str, Any], Optional[str]]:
    """The job's runtime environment, with the working directory as ``working_dir`` unless the caller chose."""
    chosen = dict(runtime_env or {})
    if "working_dir" in chosen:
        if chosen["working_dir"] is None:
            del chosen["working_dir"]
        return chosen, None
    chosen["working_dir"] = os.getcwd()
    return chosen, chosen["working_dir"]


class _DashboardLineFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "View the dashboard" not in str(record.msg)


@contextlib.contextmanager
def _without_rays_dashboard_line() -> Iterator[None]:
    """Ray logs the dashboard address too; we show it ourselves, once."""
    ray_logger = logging.getLogger("ray._private.worker")
    line_filter = _DashboardLineFilter()
    ray_logger.addFilter(line_filter)
    try:
        yield
    finally:
        ray_logger.removeFilter(line_filter)


def show_dashboard(address: Optional[str]) -> None:
    """The dashboard's address: a link in a Jupyter kernel, a plain line elsewhere; nothing without a dashboard."""
    if not address:
        return
    url = address if "://" in address else f"http://{address}"
    link = f'<a href="{html.escape(url)}" target="_blank">{html.escape(url)}</a>'
    _notebook.show(f"Ray dashboard: {link}", PREFIX + f"Ray dashboard: {url}")
