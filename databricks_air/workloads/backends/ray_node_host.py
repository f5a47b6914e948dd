"""The Ray actor that runs a workload's command on one node of the cluster (one per bundle of the placement group).

It runs the command as the local backend does, under a keeper (:mod:`.keeper`): ``bash -euo pipefail
command.sh`` in the node's copy of the code snapshot, every process it starts found and stopped with it. The
supervisor polls it for output and the exit status, and stops it through it.

``environment.dependencies`` are this actor's runtime environment ``pip`` list (:mod:`.ray_package`): Ray installed
them on this node into a virtual environment of its own before the actor started, and runs the actor in it. The
command gets that environment first on ``PATH`` and its site folder on ``PYTHONPATH``, so that scripts of the
cluster's own Python (``torchrun``) see the packages too.

The command's environment is the node's own (what Ray gives its workers: the job's ``runtime_env`` variables,
the GPUs of the bundle in ``CUDA_VISIBLE_DEVICES``), then the node's variables. Files of the run (the snapshot,
``hyperparameters.yaml``) are each node's copy of the job's working directory, so the paths the
supervisor names under its copy are moved to this node's. If the actor dies (Ray kills it, its node is lost), the
keeper's standard input closes and it stops the command with everything it started.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import Any, Dict, List, Optional

from databricks.air._engine import processes
from databricks.air.workloads import environments, node_environment
from databricks.air.workloads.backends import keeper

PRIVATE_FILE = os.path.join(".air", "private.json")
"""The secrets of the run in the job's working directory, removed by the supervisor and by every node at once."""
_READ_BLOCK = 1 << 16


class NodeHost:
    """One node's command (used as a Ray actor: ``ray.remote(NodeHost)``)."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._output: List[bytes] = []
        self._status: Optional[int] = None
        self._keeper: Optional[subprocess.Popen] = None
        self._stopping = False
        self._runner: Optional[threading.Thread] = None
        self._scratch = tempfile.mkdtemp(prefix="air-node-")
        remove_private_file(os.getcwd())

    # --- where this node is ----------------------------------------------------------------------------------------

    def where(self) -> Dict[str, Any]:
        """This node's id and address, and where the job's working directory is on it."""
        import ray

        context = ray.get_runtime_context()
        return {"node_id": context.get_node_id(), "node_ip": ray.util.get_node_ip_address(), "root": os.getcwd()}

    def master_port(self) -> int:
        """A TCP port free on this node now (node 0's is ``MASTER_PORT``)."""
        return processes.free_port("")  # free on every address: node 0 listens on its own, MASTER_ADDR

    # --- the command -----------------------------------------------------------------------------------------------

    def start(
        self,
        root: str,
        command: str,
        variables: node_environment.NodeVariables,
        grace: float,
        dependencies: Optional[List[str]],
    ) -> None:
        """Run ``command`` in ``CODE_SOURCE_PATH``, in Ray's environment of ``dependencies`` where there are some;
        ``root`` is where the supervisor's node has the job's working directory (paths under it are this node's
        copy here)."""
        here = os.getcwd()
        script = os.path.join(self._scratch, "command.sh")
        with open(script, "w", encoding="utf-8") as stream:
            stream.write(command)
        moved = variables.relocated(root, here)
        self._runner = threading.Thread(
            target=self._run,
            name="air node command",
            daemon=True,
            args=(script, moved.code_source_path, moved, grace, dependencies),
        )
        self._runner.start()

    def _run(
        self,
        script: str,
        cwd: str,
        variables: node_environment.NodeVariables,
        grace: float,
        dependencies: Optional[List[str]],
    ) -> None:
        status: Optional[int] = None
        try:
            base = node_environment.with_interpreter_on_path(os.environ)
            if dependencies:
                environments.PreparedEnvironment(sys.prefix, reused=True).apply(base)
                self._say(f"[air] environment.dependencies: Ray's runtime environment {sys.prefix}\n")
            status = self._run_under_keeper(script, cwd, variables.environ(base), grace)
        except BaseException as error:  # noqa: BLE001 - reported as the node's failure, with its reason
            self._say(f"[air] the node could not run the command: {type(error).__name__}: {error}\n")
            status = 1 if status is None or status == 0 else status
        finally:
            with self._lock:
                self._status = 128 + signal.SIGTERM if status is None else status
                self._lock.notify_all()

    def _run_under_keeper(self, script: str, cwd: str, environ: Dict[str, str], grace: float) -> int:
        """Run ``bash -euo pipefail script`` under a keeper, its output into the buffer; its exit status."""
        with self._lock:
            if self._stopping:
                return 128 + signal.SIGTERM
            self._keeper = subprocess.Popen(
                [sys.executable, "-m", keeper.__name__, str(grace), script],
                cwd=cwd,
                env=environ,
                stdin=subprocess.PIPE,  # never written: its end of file tells the keeper that this actor is gone
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            process = self._keeper
        assert process.stdout is not None
        fd = process.stdout.fileno()
        while True:
            data = os.read(fd, _READ_BLOCK)
            if not data:
                break
            with self._lock:
                self._output.append(data)
                self._lock.notify_all()
        process.stdout.close()
        return keeper.exit_code(process.wait())

    def _say(self, text: str) -> None:
        with self._lock:
            self._output.append(text.encode())
            self._lock.notify_all()

    def poll(self, wait: float) -> Dict[str, Any]:
        """Output since the last poll, and the exit status once the command has ended.

        Waits up to ``wait`` seconds for something to report, so that the supervisor can poll in a loop cheaply.
        """
        with self._lock:
            self._lock.wait_for(lambda: bool(self._output) or self._status is not None, timeout=wait)
            output, self._output = b"".join(self._output), []
            return {"output": output, "status": self._status}

    def stop(self) -> None:
        """SIGTERM to the keeper, which stops everything the command started (SIGKILL after the grace period)."""
        with self._lock:
            self._stopping = True
            process = self._keeper
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGTERM)

    def close(self, seconds: float) -> None:
        """Stop the command if it still runs, wait up to ``seconds`` for it to end, then kill its keeper."""
        self.stop()
        if self._runner is not None:
            self._runner.join(seconds)
        process = self._keeper
        if process is not None and process.poll() is None:
            process.kill()  # stuck: its command goes with it (parent death signal, end of its input)
            process.wait()
        shutil.rmtree(self._scratch, ignore_errors=True)


def remove_private_file(root: str) -> Optional[Dict[str, Any]]:
    """Read and delete the run's private file in this copy of the job's working directory (``None`` if gone)."""
    path = os.path.join(root, PRIVATE_FILE)
    try:
        with open(path, encoding="utf-8") as stream:
            private = json.load(stream)
    except FileNotFoundError:
        return None
    finally:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return dict(private)
