"""Launch latency of ``fn.distributed()`` for a tiny 2-rank gloo job, against plain Python, mp.spawn and torchrun.

What it measures
    The cost of starting ranks, not of the work they do. Workload: 2 CPU ranks, each calls
    ``dist.init_process_group("gloo")``, does one ``all_reduce`` of a 1-element tensor, calls
    ``destroy_process_group()`` and returns a small dict. Everything is measured in this one run:

    a. anchor: ``python -c "import torch"`` as a subprocess (wall time; median of 5 after 1 warm-up);
    b. our *first* call: a fresh ``python -c '<script>'`` that imports ``databricks.air``, decorates the function
       and calls ``.distributed()`` once. Reported: the call's own time (``time.perf_counter()`` around the call,
       inside the subprocess; it includes starting the rank server, which imports torch) and the whole
       subprocess's wall time (from starting it until the process exits; its output goes to files, so processes
       that inherited it, like the idle rank server unloading torch, are not waited for). Median of 5 fresh
       subprocesses after 1 warm-up;
    c. our *later* calls: one subprocess makes 1 warm-up call (which starts the rank server), then 10 timed calls;
       median;
    d. anchor: ``torch.multiprocessing.spawn`` doing the same work (results through a spawn-context queue), timed
       inside a subprocess that has already imported torch; median of 5 after 1 warm-up;
    e. anchor: ``python -m torch.distributed.run --standalone --nproc_per_node=2 <script>`` as a subprocess, each
       rank writing its result to a file (wall time plus reading the files); median of 5 after 1 warm-up;
    f. informational: (c) with ``DATABRICKS_AIR_START_METHOD=spawn`` (a fresh interpreter per rank);
       median of 5 after 1 warm-up.

    Our calls write their per-call log directories under the benchmark's scratch directory
    (``DATABRICKS_AIR_LOG_DIR``, same file system as the default), which is removed at the end.

    The rank function lives in the generated scripts: ranks never import the caller's script (a function defined
    in ``__main__`` travels by value).

Targets
    first call (b, the call's own time) <= (a) + 0.5 s;
    later call (c) <= 0.5 x mp.spawn (d) and <= 1/3 x torchrun (e).

Run: ``.venv/bin/python bench/launch_latency.py``  (about 1.5 minutes on 2 vCPUs). Nothing asserts on time; the
script prints a table and PASS/MISS per target. It exits non-zero only if a subprocess fails or a result is wrong.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
from _report import median_row, verdict
from typing import Dict, List, Sequence

PYTHON = sys.executable
RUNS = 5  # fresh subprocesses / repeated launches for (a), (b), (d), (e), (f)
LATER_CALLS = 10  # timed later calls for (c)
SUBPROCESS_TIMEOUT = 180

# The work every rank does, in every variant. RANK/WORLD_SIZE/MASTER_* come from the environment (torchrun style).
WORK = """
def work(tag):
    import os
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return {"rank": int(os.environ["RANK"]), "sum": float(t.item()), "tag": tag}
"""

EXPECTED_SUM = 2.0

# (b), (c), (f): run with ``python -c OURS <later calls>``; prints one JSON line.
OURS = (
    """
import json, sys, time
t0 = time.perf_counter()
from databricks.air import distributed
import_seconds = time.perf_counter() - t0

@distributed(accelerator_type="CPU", num_accelerators=2, timeout=None)
"""
    + WORK.lstrip("\n")
    + """
def timed_call():
    start = time.perf_counter()
    results = work.distributed("air")
    seconds = time.perf_counter() - start
    if [r["rank"] for r in results] != [0, 1] or any(r["sum"] != %r for r in results):
        raise SystemExit(f"wrong results: {results!r}")
    return seconds

first = timed_call()
later = [timed_call() for _ in range(int(sys.argv[1]))]
print(json.dumps({"import": import_seconds, "first": first, "later": later}))
"""
    % EXPECTED_SUM
)

# (d): run as a file (spawn re-imports ``__main__`` in each child, which needs a real file).
MP_SPAWN = (
    """
import json, os, socket, sys, time
import torch
import torch.multiprocessing as mp
"""
    + WORK
    + """
def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]

def worker(local_rank, world_size, port, queue):
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(local_rank), LOCAL_RANK=str(local_rank),
        WORLD_SIZE=str(world_size),
    )
    queue.put(work("mp.spawn"))

def once():
    start = time.perf_counter()
    queue = mp.get_context("spawn").SimpleQueue()
    mp.spawn(worker, args=(2, free_port(), queue), nprocs=2, join=True)
    results = sorted((queue.get() for _ in range(2)), key=lambda r: r["rank"])
    seconds = time.perf_counter() - start
    if [r["rank"] for r in results] != [0, 1] or any(r["sum"] != %r for r in results):
        raise SystemExit(f"wrong results: {results!r}")
    return seconds

if __name__ == "__main__":
    once()  # warm-up
    print(json.dumps([once() for _ in range(int(sys.argv[1]))]))
"""
    % EXPECTED_SUM
)

# (e): the torchrun worker; writes its result to <out_dir>/result_<rank>.json.
TORCHRUN_WORKER = (
    """
import json, os, sys
"""
    + WORK
    + """
if __name__ == "__main__":
    result = work("torchrun")
    with open(os.path.join(sys.argv[1], "result_%d.json" % result["rank"]), "w") as stream:
        json.dump(result, stream)
"""
)


def run(argv: Sequence[str], env: Dict[str, str] = None, what: str = "") -> subprocess.CompletedProcess:
    """Run a subprocess until it exits; stop the benchmark with its output if it fails.

    Output goes to files, not pipes, and the wall time (``.wall``) ends when the process exits: a pipe would also
    wait for whatever inherited it (an idle rank server keeps the caller's stderr until it has unloaded torch),
    which is not what a user waits for.
    """
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        process = subprocess.Popen(list(argv), env=env, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            returncode = process.wait(timeout=SUBPROCESS_TIMEOUT)
        except subprocess.TimeoutExpired:
            process.kill()
            returncode = process.wait()
        seconds = time.perf_counter() - start
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(
            list(argv), returncode, out.read().decode(errors="replace"), err.read().decode(errors="replace")
        )
    done.wall = seconds  # type: ignore[attr-defined]
    if done.returncode != 0:
        sys.stderr.write(
            f"\n{what or argv[:3]} failed with exit status {done.returncode}\n--- stdout\n{done.stdout}\n"
            f"--- stderr\n{done.stderr}\n"
        )
        raise SystemExit(1)
    return done


def wall(argv: Sequence[str], env: Dict[str, str] = None, what: str = "") -> tuple:
    done = run(argv, env, what)
    return done.wall, done  # type: ignore[attr-defined]


def last_json(done: subprocess.CompletedProcess):
    return json.loads(done.stdout.strip().splitlines()[-1])


def check_log_lines(done: subprocess.CompletedProcess, calls: int, what: str) -> None:
    lines = [line for line in done.stderr.splitlines() if line.startswith("databricks.air: running ")]
    if len(lines) != calls or not all("; logs: " in line for line in lines):
        sys.stderr.write(
            f"{what}: expected {calls} 'databricks.air: running ...; logs: ...' line(s) on stderr, got:\n"
            f"{done.stderr}\n"
        )
        raise SystemExit(1)


LOG_DIR: Dict[str, str] = {}  # set in main(): our calls' log directories go to the benchmark's scratch dir


def env_with(**extra: str) -> Dict[str, str]:
    env = dict(os.environ)
    env.pop("DATABRICKS_AIR_START_METHOD", None)
    env["DATABRICKS_AIR_MLFLOW"] = "0"  # the targets are the engine's; (g) and (h) measure tracking on top
    env.update(LOG_DIR)
    env.update(extra)
    return env


def measure_import_torch() -> List[float]:
    argv = [PYTHON, "-c", "import torch"]
    wall(argv, what="python -c 'import torch'")  # warm-up
    return [wall(argv, what="python -c 'import torch'")[0] for _ in range(RUNS)]


def measure_first_call(**extra_env: str) -> tuple:
    """(call's own times, whole-subprocess wall times, import times)."""
    argv = [PYTHON, "-c", OURS, "0"]
    env = env_with(**extra_env)
    wall(argv, env, "first-call subprocess")  # warm-up
    calls, walls, imports = [], [], []
    for _ in range(RUNS):
        seconds, done = wall(argv, env, "first-call subprocess")
        check_log_lines(done, 1, "first-call subprocess")
        data = last_json(done)
        calls.append(data["first"])
        walls.append(seconds)
        imports.append(data["import"])
    return calls, walls, imports


def measure_later_calls(count: int, **extra_env: str) -> List[float]:
    done = run([PYTHON, "-c", OURS, str(count)], env_with(**extra_env), "later-calls subprocess")
    check_log_lines(done, count + 1, "later-calls subprocess")
    return last_json(done)["later"]


def measure_mp_spawn(workdir: str) -> List[float]:
    script = os.path.join(workdir, "bench_mp_spawn.py")
    with open(script, "w") as stream:
        stream.write(MP_SPAWN)
    return last_json(run([PYTHON, script, str(RUNS)], env_with(), "mp.spawn subprocess"))


def measure_torchrun(workdir: str) -> List[float]:
    script = os.path.join(workdir, "bench_torchrun_worker.py")
    with open(script, "w") as stream:
        stream.write(TORCHRUN_WORKER)
    times = []
    for index in range(RUNS + 1):  # the first is a warm-up
        out_dir = tempfile.mkdtemp(dir=workdir)
        argv = [PYTHON, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", script, out_dir]
        start = time.perf_counter()
        run(argv, env_with(), "torchrun")
        results = []
        for rank in range(2):
            with open(os.path.join(out_dir, f"result_{rank}.json")) as stream:
                results.append(json.load(stream))
        seconds = time.perf_counter() - start
        if [r["rank"] for r in results] != [0, 1] or any(r["sum"] != EXPECTED_SUM for r in results):
            sys.stderr.write(f"torchrun: wrong results {results!r}\n")
            raise SystemExit(1)
        if index:
            times.append(seconds)
    return times


row = functools.partial(median_row, width=56)


def main() -> None:
    print("bench/launch_latency.py: launch latency of a 2-rank gloo all_reduce job (seconds)\n")
    _machine.print_machine()
    bench_start = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="air-bench-launch-")
    LOG_DIR["DATABRICKS_AIR_LOG_DIR"] = os.path.join(workdir, "logs")  # same file system as the default; removed
    try:
        a = measure_import_torch()
        b_call, b_wall, b_import = measure_first_call()
        c = measure_later_calls(LATER_CALLS)
        d = measure_mp_spawn(workdir)
        e = measure_torchrun(workdir)
        f = measure_later_calls(RUNS, DATABRICKS_AIR_START_METHOD="spawn")
        tracked = {"DATABRICKS_AIR_MLFLOW": "1", "MLFLOW_TRACKING_URI": f"sqlite:///{workdir}/mlflow.db"}
        g = measure_later_calls(RUNS, **tracked)
        h = measure_first_call(**tracked)[0]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print(f"  {'measurement':<56} {'n':>3} {'median':>8} {'min':>8} {'max':>8}")
    print(row("(a) anchor: python -c 'import torch' (wall)", a))
    print(row("(b) first call: the call itself (perf_counter)", b_call))
    print(row("(b) first call: whole fresh subprocess (wall)", b_wall))
    print(row("    of which `from databricks.air import distributed`", b_import))
    print(row("(c) later call, same process (fork from rank server)", c))
    print(row("(d) anchor: torch.multiprocessing.spawn, torch imported", d))
    print(row("(e) anchor: torchrun --standalone --nproc_per_node=2", e))
    print(row("(f) later call, DATABRICKS_AIR_START_METHOD=spawn", f))
    print(row("(g) later call, MLflow tracking on (SQLite store)", g))
    print(row("(h) first call, MLflow tracking on (SQLite store)", h))
    print()

    ma, mb_call, mb_wall = statistics.median(a), statistics.median(b_call), statistics.median(b_wall)
    mc, md, me, mf = statistics.median(c), statistics.median(d), statistics.median(e), statistics.median(f)
    print("  ratios (medians)                                         value   target")
    print(
        f"  first call - import torch   (b call - a)             {mb_call - ma:>+7.3f} s  <= +0.5 s   "
        f"{verdict(mb_call - ma <= 0.5)}"
    )
    print(f"  first-call subprocess - import torch (b wall - a)    {mb_wall - ma:>+7.3f} s  (info)")
    print(
        f"  later call / mp.spawn       (c / d)                  {mc / md:>8.3f}    <= 0.5      "
        f"{verdict(mc <= 0.5 * md)}"
    )
    print(
        f"  later call / torchrun       (c / e)                  {mc / me:>8.3f}    <= 0.333    {verdict(mc <= me / 3)}"
    )
    print(f"  spawn-mode later call / mp.spawn  (f / d)            {mf / md:>8.3f}    (info)")
    print(f"  spawn-mode later call / torchrun  (f / e)            {mf / me:>8.3f}    (info)")
    print(f"  tracking's cost on a later call (g - c)              {statistics.median(g) - mc:>+7.3f} s  (info)")
    print(f"  tracking's cost on a first call (h - b call)         {statistics.median(h) - mb_call:>+7.3f} s  (info)")
    print(f"\n  benchmark took {time.perf_counter() - bench_start:.0f} s")


if __name__ == "__main__":
    main()
