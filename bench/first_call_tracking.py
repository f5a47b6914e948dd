"""The first call of a process with MLflow tracking, against the same call without it (issue 33).

What it measures
    Fresh interpreters, each making one call of a trivial 2-CPU-rank function (each rank returns its rank) and
    exiting. Tracking uses MLflow's default store, ``mlflow.db`` in the working directory (the scratch folder), which
    exists already: a warm-up process made its tables and the experiment before the timed runs. The calls' log
    folders go to the scratch folder too; everything is removed at the end.

    a. untracked, a script: a fresh ``python -c`` that imports ``databricks.air``, decorates the function and
       calls it at once (``DATABRICKS_AIR_MLFLOW=0``);
    b. tracked, a script: the same with tracking on (the default), the tracking host running (started by an earlier
       script of the session, which is how every script after the first finds it: ``_tracking/tracking_host.py``);
    c. untracked, a notebook: a fresh Jupyter kernel (this interpreter's ipykernel); one cell imports
       ``databricks.air``, and 6 s later (cells run one by one) the next one decorates the function and calls it;
    d. tracked, a notebook: the same with tracking on.

    f. tracked, a script, no tracking host running: the session's first script, which starts the host at decoration
       and waits for it at the call (the host is stopped before each);
    g. tracked, a script, the host switched off (``DATABRICKS_AIR_TRACKING_HOST=0``): MLflow imported in the
       script, in the background from decoration on (``_tracking/warmup.py``), as before the host.

    Timed: the call itself, from ``.distributed()`` until it returns (``time.perf_counter()`` in the process or the
    kernel); also reported: the time from before ``import databricks.air`` until the call's end (in a notebook, less
    the wait between the cells), ``import databricks.air`` in each, and the closing line's duration (the whole
    call's).
    Rounds alternate the six (ABCDFG, then GFDCBA, ...); medians over the rounds. Before them, one untimed script of
    each kind and one tracked notebook warm the file cache, make the store and its experiment.

    e. ``import databricks.air`` alone: ``python -c "import databricks.air"`` wall time, and the import's own time
       measured inside the process, median of IMPORTS fresh processes (tracking on, as a user has it).

    The scratch folder is the processes' ``TMPDIR`` too, so the host is the benchmark's own; it is stopped at the end.

Targets
    b / a <= 1.5 (a script) and d / c <= 1.15 (a notebook); f / a and g / a for information.

Run
    ``.venv/bin/python bench/first_call_tracking.py`` (about 3 minutes on 2 vCPUs; ``--rounds 5`` for more; needs
    ipykernel and jupyter_client, in the ``dev`` extra)

Nothing asserts on time; it prints a table and PASS/MISS. It exits non-zero only if a process fails or a call returns
a wrong value.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _machine

PYTHON = sys.executable
NOTEBOOK_DELAY = 6.0
IMPORTS = 7

SCRIPT = r"""
import json, sys, time
started = time.perf_counter()
import databricks.air
from databricks.air import distributed
imported = time.perf_counter()

@distributed(num_accelerators=2, accelerator_type="CPU", timeout=600)
def work():
    import os
    return int(os.environ["RANK"])

begin = time.perf_counter()
values = work.distributed()
end = time.perf_counter()
assert values == [0, 1], values
print(json.dumps({"import": imported - started, "call": end - begin, "since_start": end - started}))
"""

IMPORT_CELL = """
import time as _time
_started = _time.perf_counter()
import databricks.air
from databricks.air import distributed
_imported = _time.perf_counter() - _started
"""

CALL_CELL = """
import json as _json

@distributed(num_accelerators=2, accelerator_type="CPU", timeout=600)
def work():
    import os
    return int(os.environ["RANK"])

_begin = _time.perf_counter()
_values = work.distributed()
_end = _time.perf_counter()
assert _values == [0, 1], _values
print(_json.dumps({"import": _imported, "call": _end - _begin, "since_start": _end - _started}))
"""


def closing(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if " finished in " in line]
    return lines[-1].rsplit(" finished in ", 1)[1] if lines else "?"


def run_script(env: Dict[str, str], cwd: str) -> Dict[str, float]:
    """A script: a fresh ``python -c``, its output to files (a pipe would wait for the idle rank server too)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        done = subprocess.run(
            [PYTHON, "-c", SCRIPT], env=env, cwd=cwd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, timeout=600
        )
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read().decode(errors="replace"), err.read().decode(errors="replace")
    if done.returncode != 0:
        sys.stderr.write(f"a first call failed (exit {done.returncode})\n--- stdout\n{stdout}\n--- stderr\n{stderr}\n")
        raise SystemExit(1)
    result = json.loads(stdout.strip().splitlines()[-1])
    result["closing"] = closing(stderr)
    return result


def run_notebook(env: Dict[str, str], cwd: str, delay: float) -> Dict[str, float]:
    """A notebook: a fresh Jupyter kernel (this interpreter's ipykernel); one cell imports ``databricks.air``,
    ``delay`` seconds later the next decorates the function and calls it."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    kernels = os.path.join(cwd, "kernels")  # this interpreter's kernel, not whatever `python3` spec is installed
    os.makedirs(os.path.join(kernels, "python3"), exist_ok=True)
    with open(os.path.join(kernels, "python3", "kernel.json"), "w") as spec:
        json.dump(
            {
                "argv": [PYTHON, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Python 3",
                "language": "python",
            },
            spec,
        )
    manager = KernelManager(
        kernel_name="python3", kernel_spec_manager=KernelSpecManager(kernel_dirs=[kernels], ensure_native_kernel=False)
    )
    manager.start_kernel(
        cwd=cwd, env=dict(env, PYDEVD_DISABLE_FILE_VALIDATION="1"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    client = manager.client()
    client.start_channels()
    client.wait_for_ready(timeout=120)
    streams: Dict[str, List[str]] = {"stdout": [], "stderr": []}

    def keep(message: dict) -> None:
        if message["msg_type"] == "stream":
            streams[message["content"]["name"]].append(message["content"]["text"])
        elif message["msg_type"] == "error":
            streams["stderr"].append("\n".join(message["content"]["traceback"]))

    try:
        for cell, wait in ((IMPORT_CELL, delay), (CALL_CELL, 0.0)):
            reply = client.execute_interactive(cell, timeout=600, output_hook=keep)
            if reply["content"]["status"] != "ok":
                sys.stderr.write(f"a notebook cell failed\n{''.join(streams['stderr'])}\n")
                raise SystemExit(1)
            time.sleep(wait)
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)
    result = json.loads("".join(streams["stdout"]).strip().splitlines()[-1])
    result["closing"] = closing("".join(streams["stderr"]))
    return result


def stop_hosts(scratch: str) -> None:
    """Stop the tracking host of the scratch ``TMPDIR``, if one runs."""
    import glob

    from databricks.air._tracking import tracking_host

    for folder in glob.glob(os.path.join(scratch, f"databricks-air-{os.getuid()}", "tracking", "*")):
        tracking_host.stop(folder)


def import_times(env: Dict[str, str], cwd: str) -> tuple:
    code = "import time; t = time.perf_counter(); import databricks.air; print(time.perf_counter() - t)"
    walls, inside = [], []
    for _ in range(IMPORTS + 1):
        start = time.perf_counter()
        done = subprocess.run([PYTHON, "-c", code], env=env, cwd=cwd, capture_output=True, text=True, check=True)
        walls.append(time.perf_counter() - start)
        inside.append(float(done.stdout.strip().splitlines()[-1]))
    return walls[1:], inside[1:]  # the first one warms the file cache


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=NOTEBOOK_DELAY, help="seconds between import and call (c, d)")
    options = parser.parse_args()

    print("First call with MLflow tracking (bench/first_call_tracking.py)")
    _machine.print_machine()
    scratch = tempfile.mkdtemp(prefix="air-bench-first-call-")
    try:
        base = dict(os.environ)
        for name in (
            "MLFLOW_TRACKING_URI",
            "MLFLOW_EXPERIMENT_NAME",
            "MLFLOW_EXPERIMENT_ID",
            "DATABRICKS_AIR_MLFLOW",
            "DATABRICKS_AIR_START_METHOD",
            "DATABRICKS_INTERNAL_BETA_WARNING_PRINTED",
        ):
            base.pop(name, None)
        base["DATABRICKS_AIR_LOG_DIR"] = os.path.join(scratch, "logs")
        base["TMPDIR"] = scratch  # the tracking host's folder lies under it: the benchmark's own host
        base.pop("DATABRICKS_AIR_TRACKING_HOST", None)
        tracked = dict(base)
        untracked = dict(base, DATABRICKS_AIR_MLFLOW="0")
        no_host = dict(base, DATABRICKS_AIR_TRACKING_HOST="0")

        def first_of_session() -> Dict[str, float]:
            stop_hosts(scratch)
            return run_script(tracked, scratch)

        run_script(tracked, scratch)  # makes the store (mlflow.db here) and the experiment; warms the file cache
        run_script(untracked, scratch)
        run_notebook(tracked, scratch, 0.0)
        variants = {
            "a": ("untracked, script", lambda: run_script(untracked, scratch)),
            "b": ("tracked, script", lambda: run_script(tracked, scratch)),
            "c": (
                f"untracked, notebook (call {options.delay:g} s after the import)",
                lambda: run_notebook(untracked, scratch, options.delay),
            ),
            "d": (
                f"tracked, notebook (call {options.delay:g} s after the import)",
                lambda: run_notebook(tracked, scratch, options.delay),
            ),
            "f": ("tracked, script, no tracking host yet (the session's first)", first_of_session),
            "g": ("tracked, script, tracking host off", lambda: run_script(no_host, scratch)),
        }
        results: Dict[str, List[Dict[str, float]]] = {key: [] for key in variants}
        for round_ in range(options.rounds):
            order = list(variants) if round_ % 2 == 0 else list(reversed(list(variants)))
            for key in order:
                results[key].append(variants[key][1]())
                print(
                    f"  round {round_ + 1} {key}: call {results[key][-1]['call']:.3f} s "
                    f"(closing line {results[key][-1]['closing']}), load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
        walls, inside = import_times(tracked, scratch)
    finally:
        stop_hosts(scratch)
        shutil.rmtree(scratch, ignore_errors=True)

    def median(key: str, field: str) -> float:
        return statistics.median(r[field] for r in results[key])

    print()
    print(
        "| | first call | the call itself, median (each round) | from `import databricks.air` to the call's end "
        "| `import databricks.air` in it |"
    )
    print("| --- | --- | --- | --- | --- |")
    for key, (label, _) in variants.items():
        each = ", ".join(f"{r['call']:.2f}" for r in results[key])
        since = median(key, "since_start") - (options.delay if key in "cd" else 0.0)
        print(
            f"| {key} | {label} | {median(key, 'call'):.3f} s ({each}) | {since:.3f} s"
            f"{' (less the wait between cells)' if key in 'cd' else ''} | {median(key, 'import') * 1000:.1f} ms |"
        )
    print(
        f'| e | `python -c "import databricks.air"`, {IMPORTS} fresh processes '
        f"| wall {statistics.median(walls):.3f} s | {statistics.median(inside) * 1000:.1f} ms |"
    )
    print()
    script = median("b", "call") / median("a", "call")
    notebook = median("d", "call") / median("c", "call")
    print(f"b / a (a script):   {script:.3f}  target <= 1.5   {'PASS' if script <= 1.5 else 'MISS'}")
    print(f"d / c (a notebook): {notebook:.3f}  target <= 1.15  {'PASS' if notebook <= 1.15 else 'MISS'}")
    for key in "fg":
        print(f"{key} / a ({variants[key][0]}, information): {median(key, 'call') / median('a', 'call'):.3f}")
    whole = median("b", "since_start") / median("a", "since_start")
    print(f"b / a from the import on (information): {whole:.3f}")
    print(f"load avg at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
