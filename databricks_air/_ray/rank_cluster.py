"""A Ray cluster made of the ranks of one call: what ``ray_launch`` runs in every rank.

Rank 0 starts a Ray head node on its machine (``MASTER_ADDR``), the first rank of every other node of the call
(``LOCAL_RANK`` 0 where ``NODE_RANK`` > 0) starts a worker node that joins it (:mod:`.loopback_node` where both are
on one machine's loopback and Ray keeps to it), and rank 0 then runs the user's function as the Ray driver,
connected to that cluster (``RAY_ADDRESS`` is set for it too). Its value is the call's value at index 0; every other
rank returns ``None``. When the function ends, however it ends, the nodes are stopped and their files removed: a
call leaves no Ray cluster behind. Each node is a ``ray start --block`` process in its rank's process group, so
stopping a rank (a failure elsewhere, the timeout, an interrupt) stops its Ray node with it.

Every port is picked free (nothing assumes 6379, 8265 or 10001, which another Ray on the same machine may hold),
and the dashboard listens on 127.0.0.1. Machines find the head through the call's rendezvous store
(``MASTER_ADDR:MASTER_PORT``), which needs no process group and never touches a GPU.
"""

from __future__ import annotations

import datetime
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, Optional, Tuple

from databricks.air._engine.processes import free_port, listen
from databricks.air._ray import loopback_node, session
from databricks.air._ray.require import import_ray
from databricks.air.exceptions import RayConnectionError, RayInitializationError
from databricks.air._notices import notice

HEAD_KEY = "databricks.air/ray-head"
DONE_KEY = "databricks.air/ray-done"
START_SECONDS = 120.0
STOP_SECONDS = 30.0
_LOG_TAIL_BYTES = 4000
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_WATCH_SECONDS = 0.5  # how often a worker node's rank looks for the driver's end, and at its node


def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
    """The function every rank runs for ``ray_launch(func)``; it binds arguments like ``func`` does."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return run_rank(func, args, kwargs)

    wrapper.__wrapped__ = func  # type: ignore[attr-defined]  # inspect.signature follows it
    for attribute in ("__name__", "__qualname__", "__doc__"):
        if hasattr(func, attribute):
            setattr(wrapper, attribute, getattr(func, attribute))
    return wrapper


def run_rank(func: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
    """This rank's part: the head and the driver on rank 0, a worker node on other machines, nothing elsewhere."""
    import_ray()
    rank = int(os.environ.get("RANK", "0"))
    if int(os.environ.get("LOCAL_RANK", "0")) != 0:
        return None  # one Ray node per machine, started by its first rank
    nodes = int(os.environ.get("GROUP_WORLD_SIZE", "1"))
    store = _rendezvous_store(rank) if nodes > 1 else None
    if rank == 0:
        return _drive(func, args, kwargs, nodes, store)
    _serve_worker_node(store)
    return None


def _drive(func: Callable[..., Any], args: Tuple[Any, ...], kwargs: Dict[str, Any], nodes: int, store: Any) -> Any:
    import ray

    head = RayNode.start(head_ip=os.environ.get("MASTER_ADDR", "127.0.0.1"))
    try:
        if store is not None:
            store.set(HEAD_KEY, head.address)
        notice(f"ray_launch started a Ray cluster; its head is {head.address}")
        os.environ["RAY_ADDRESS"] = head.address
        session.ray_init(address=head.address)
        _wait_for_nodes(ray, nodes, head)
        return func(*args, **kwargs)
    finally:
        try:
            if store is not None:
                store.set(DONE_KEY, "1")
            ray.shutdown()
        finally:
            head.stop()


def _serve_worker_node(store: Any) -> None:
    """Run this node's Ray worker node until rank 0 says that the driver is done; a node that ends before that (it
    could not join, or died) fails this rank at once with its own words, rather than leaving rank 0 to wait."""
    head_address = store.get(HEAD_KEY).decode()
    node = RayNode.start(head_ip=None, join=head_address)
    try:
        while not _done(store):
            if node.process.poll() is not None:
                raise RayInitializationError(
                    f"the Ray worker node of NODE_RANK {os.environ.get('NODE_RANK', '?')} joining {head_address} "
                    f"ended with exit code {node.process.returncode} before the call did:\n{node.log_tail()}"
                )
            time.sleep(_WATCH_SECONDS)
    finally:
        node.stop()


def _done(store: Any) -> bool:
    try:
        return bool(store.check([DONE_KEY]))
    except Exception:  # noqa: BLE001 - rank 0's store is gone: so is the driver
        return True


def _rendezvous_store(rank: int) -> Any:
    """The call's key-value store at ``MASTER_ADDR:MASTER_PORT``: the launcher's (local runs) or rank 0's."""
    from torch.distributed import TCPStore

    hosted_by_launcher = os.environ.get("TORCHELASTIC_USE_AGENT_STORE", "").lower() == "true"
    host, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    # Rank 0 hosts the store on MASTER_ADDR only (TCPStore alone would listen on every address). The store serves
    # the descriptor without owning it: detached, it stays open as long as this process.
    hosts = rank == 0 and not hosted_by_launcher
    return TCPStore(
        host,
        port,
        is_master=hosts,
        timeout=datetime.timedelta(seconds=START_SECONDS),
        wait_for_workers=False,
        master_listen_fd=listen(host, port).detach() if hosts else None,
    )


def _wait_for_nodes(ray: Any, nodes: int, head: "RayNode") -> None:
    deadline = time.monotonic() + START_SECONDS
    while True:
        alive = [node for node in ray.nodes() if node.get("Alive")]
        if len(alive) >= nodes:
            return
        if time.monotonic() >= deadline:
            raise RayInitializationError(
                f"only {len(alive)} of the {nodes} Ray nodes of this call joined the head at {head.address} within "
                f"{START_SECONDS:g} s; the other machines' first ranks could not reach it (check that the "
                "machines can reach each other on every port)"
            )
        time.sleep(0.5)


class RayNode:
    """One ``ray start --block`` process (a head, or a worker joining one) and its temporary directory."""

    def __init__(self, process: subprocess.Popen, temp_dir: str, address: str) -> None:
        self.process = process
        self.temp_dir = temp_dir
        self.address = address

    @classmethod
    def start(cls, head_ip: Optional[str], join: Optional[str] = None) -> "RayNode":
        """Start a head on ``head_ip``, or a worker node joining ``join`` (``host:port``)."""
        temp_dir = tempfile.mkdtemp(prefix="air-ray-", dir=session.private_folder())  # Ray makes it 0777
        if join is None:
            assert head_ip is not None
            node_ip, port = head_ip, free_port(head_ip)
            address = f"{head_ip}:{port}"
            role = [
                "--head",
                f"--port={port}",
                f"--ray-client-server-port={free_port(head_ip)}",
                f"--dashboard-host={session.LOCAL_DASHBOARD_HOST}",
                f"--dashboard-port={free_port()}",
            ]
        else:
            node_ip, address = _own_ip(join), join
            role = [f"--address={join}"]
        ports = [f"--dashboard-agent-listen-port={free_port(node_ip)}", f"--metrics-export-port={free_port(node_ip)}"]
        if join is not None and _joins_over_loopback(join):
            command = [
                sys.executable,
                "-m",
                loopback_node.__name__,
                f"--address={join}",
                f"--node-ip-address={node_ip}",
                f"--temp-dir={temp_dir}",
                *ports,
            ]
        else:
            command = [
                sys.executable,
                "-c",
                "from ray.scripts.scripts import main; main()",
                "start",
                "--block",
                f"--node-ip-address={node_ip}",
                f"--temp-dir={temp_dir}",
                "--disable-usage-stats",
                *ports,
                *role,
            ]
        environ = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
        if join is None and session.is_loopback_host(node_ip):
            # A head for the ranks of one machine: Ray's single-machine setting keeps its servers (GCS, raylet,
            # agents, workers) on 127.0.0.1, as ray_init's does; without it they listen on every interface, whatever
            # --node-ip-address says, and take requests, code included, from whoever reaches them.
            environ[session.SINGLE_MACHINE_VARIABLE] = "0"
        log = open(os.path.join(temp_dir, "ray-start.log"), "wb")
        try:
            process = subprocess.Popen(command, env=environ, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        finally:
            log.close()
        node = cls(process, temp_dir, address)
        try:
            node._wait_until_up(join is None)
        except BaseException:
            node.stop()
            raise
        return node

    def _wait_until_up(self, head: bool) -> None:
        host, _, port = self.address.rpartition(":")
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RayInitializationError(
                    f"`ray start` ended with exit code {self.process.returncode} before its node was up:\n"
                    f"{self.log_tail()}"
                )
            if not head:
                return  # a worker node registers with the head; the driver counts the nodes
            try:
                socket.create_connection((host, int(port)), timeout=1).close()
                return
            except OSError:
                time.sleep(0.2)
        raise RayConnectionError(
            f"the Ray head at {self.address} did not accept connections within {START_SECONDS:g} s:\n{self.log_tail()}"
        )

    def log_tail(self) -> str:
        try:
            with open(os.path.join(self.temp_dir, "ray-start.log"), "rb") as stream:
                stream.seek(0, os.SEEK_END)
                stream.seek(max(0, stream.tell() - _LOG_TAIL_BYTES))
                return _ANSI.sub("", stream.read().decode("utf-8", "replace"))  # ray start colours its words
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the node (``ray start`` stops the processes it started on SIGTERM) and remove its files."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_SECONDS)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.temp_dir, ignore_errors=True)


def _joins_over_loopback(head_address: str) -> bool:
    """Whether a worker node joins ``head_address`` as :mod:`.loopback_node` does rather than with ``ray start``:
    the head is on this machine's loopback address and Ray's multi-node switch is off, so ``ray start`` would refuse
    (a head anywhere else always takes ``ray start``, which then says why it cannot join)."""
    from ray._private import ray_constants

    return session.is_loopback_host(head_address.rpartition(":")[0]) and not ray_constants.ENABLE_RAY_CLUSTER


def _own_ip(head_address: str) -> str:
    """The address this machine uses to reach the head (no packet is sent)."""
    host, _, port = head_address.rpartition(":")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, int(port)))
        return str(probe.getsockname()[0])
