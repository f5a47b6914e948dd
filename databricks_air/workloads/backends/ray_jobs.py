"""The Ray cluster as the submitting machine sees it: its dashboard's job submission API, and its nodes.

An address is what Ray's own tools take: the dashboard's ``http://HOST:8265`` (what ``ray job submit
--address`` takes, and all this side needs: a KubeRay port-forward or a Databricks Ray cluster's dashboard URL
will do), or the cluster's own address, ``HOST:6379`` or ``ray://HOST:10001``, as ``@distributed(remote=True)``
takes it in ``RAY_ADDRESS``, from which the dashboard is found. Ray's clients let ``RAY_ADDRESS`` override the
address they are given; here the address given wins.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import queue
import threading
from typing import Any, Dict, Iterator, List, Optional

from databricks.air._ray import session
from databricks.air._ray.require import import_ray
from databricks.air.workloads.errors import InvalidArguments, WorkloadError

ADDRESS_VARIABLE = session.ADDRESS_VARIABLE
_OVERRIDING = (ADDRESS_VARIABLE, "RAY_API_SERVER_ADDRESS")  # read by Ray's clients before their argument
TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
"""Ray's terminal job statuses."""


class ClusterUnreachable(WorkloadError):
    """The Ray cluster's dashboard does not answer."""


@contextlib.contextmanager
def _address_as_given() -> Iterator[None]:
    saved = {name: os.environ.pop(name) for name in _OVERRIDING if name in os.environ}
    try:
        yield
    finally:
        os.environ.update(saved)


def dashboard_url(address: str) -> str:
    """The dashboard's URL for any address Ray's tools take (see the module docstring)."""
    address = address.strip().rstrip("/")
    if address.startswith(("http://", "https://")):
        return address
    import_ray()
    from ray.dashboard import utils as dashboard_utils

    session.check_reachable(address, "the Ray address")  # Ray's own lookup retries for minutes
    try:
        with _address_as_given():
            if address.startswith("ray://"):
                return dashboard_utils.ray_client_address_to_api_server_url(address).rstrip("/")
            return dashboard_utils.ray_address_to_api_server_url(address).rstrip("/")
    except Exception as error:  # noqa: BLE001 - Ray raises what it likes; the message says what to do
        raise ClusterUnreachable(
            f"the Ray cluster at {address} answered, but its dashboard could not be found ({error}). The workload "
            "command talks to the dashboard (job submission): start the head with its dashboard, or pass "
            "--address http://HEAD:8265."
        ) from None


class RayJobs:
    """One cluster's job submission API (``ray.job_submission.JobSubmissionClient``) and its state API."""

    def __init__(self, url: str) -> None:
        import_ray()
        from ray.job_submission import JobSubmissionClient

        # Ray's client logs each upload and each closed log stream at INFO; air says what matters itself.
        logging.getLogger("ray.dashboard").setLevel(logging.WARNING)
        self.url = url
        try:
            with _address_as_given():
                self.client = JobSubmissionClient(url)
        except Exception as error:  # noqa: BLE001 - a connection error, whatever its class
            raise ClusterUnreachable(
                f"no Ray dashboard answers at {url}: {_first_line(error)}. The job submission API is served by the "
                "head node's dashboard (port 8265 by default); from outside a KubeRay cluster, port-forward it "
                "(kubectl port-forward service/CLUSTER-head-svc 8265:8265) and pass --address http://127.0.0.1:8265."
            ) from None

    @classmethod
    def connect(cls, address: Optional[str]) -> "RayJobs":
        """The cluster at ``address``, else at ``RAY_ADDRESS``."""
        address = (address or os.environ.get(ADDRESS_VARIABLE, "")).strip()
        if not address:
            raise InvalidArguments(
                "--backend ray needs the Ray cluster's address: --address http://HEAD:8265 (its dashboard), or "
                f"{ADDRESS_VARIABLE} (the dashboard's URL, or the cluster's HOST:PORT as remote=True uses it)"
            )
        return cls(dashboard_url(address))

    def job_url(self, job_id: str) -> str:
        """The job's page on the dashboard."""
        return f"{self.url}/#/jobs/{job_id}"

    def submit(self, **arguments: Any) -> str:
        return str(self.client.submit_job(**arguments))

    def stop(self, job_id: str) -> bool:
        return bool(self.client.stop_job(job_id))

    def info(self, job_id: str) -> Any:
        return self.client.get_job_info(job_id)

    def logs(self, job_id: str) -> str:
        return str(self.client.get_job_logs(job_id))

    def tail(self, job_id: str, stop: threading.Event) -> Iterator[str]:
        """The job's log as it is written, from its start, until the job has ended (or ``stop`` is set)."""
        chunks: "queue.Queue[Optional[object]]" = queue.Queue()

        async def pump() -> None:
            try:
                async for chunk in self.client.tail_job_logs(job_id):
                    chunks.put(chunk)
                    if stop.is_set():
                        break
            except BaseException as error:  # noqa: BLE001 - handed to the reader, which decides
                chunks.put(error)
            finally:
                chunks.put(None)

        thread = threading.Thread(target=asyncio.run, args=(pump(),), daemon=True, name="ray job log tail")
        thread.start()
        while True:
            try:
                item = chunks.get(timeout=0.5)
            except queue.Empty:
                if stop.is_set():
                    return
                continue
            if item is None:
                return
            if isinstance(item, BaseException):
                raise item
            yield str(item)

    def nodes(self) -> List[Dict[str, Any]]:
        """The cluster's nodes as ``ray.nodes()`` describes them (``Alive``, ``Resources``, ``NodeManagerAddress``)."""
        from ray.util.state import list_nodes

        with _address_as_given():
            found = list_nodes(address=self.url, limit=10_000, raise_on_missing_output=False)
        return [
            {
                "Alive": node.state == "ALIVE",
                "Resources": dict(node.resources_total or {}),
                "NodeManagerAddress": node.node_ip,
                "NodeID": node.node_id,
            }
            for node in found
        ]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0].rstrip(".") if text else type(error).__name__
