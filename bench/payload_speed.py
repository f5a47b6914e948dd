"""What shipping code by value costs the caller: ``_payload.serialize_function`` against plain ``cloudpickle.dumps``.

What it measures
    The function of ``examples/train_ddp.py`` (its ``train``, with the helpers, the model class and the globals it
    uses), from a module registered to travel by value, as a script's code does:

    a. anchor: ``cloudpickle.dumps(train)``, which names every code object's file ``<dynamic-code>``;
    b. ``_payload.serialize_function(train)``: the code objects whole (``marshal``), with their file name, and the
       script's lines once (:mod:`databricks.air._engine.by_value`);
    c. in a fresh interpreter, loading (b) (what a rank does before it calls the function), against loading (a).

    Medians of 200 repetitions after 20 warm-ups, (a) and (b) alternating; payload sizes in bytes.

Target
    (b) <= (a) + 1 ms: shipping file names and source must not make a call measurably slower (a warm call takes
    about 100 ms).

Run: ``.venv/bin/python bench/payload_speed.py`` (a few seconds). Nothing asserts on time.
"""

from __future__ import annotations

import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import _machine  # bench/_machine.py: this directory is on sys.path when a script runs
from typing import Callable, List, Tuple

import cloudpickle

from databricks.air import _payload

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(HERE, "..", "examples", "train_ddp.py")
REPEATS = 200
WARM_UPS = 20
TARGET_SECONDS = 0.001

LOAD = """
import pickle, sys, time
data = open(sys.argv[1], "rb").read()
times = []
for _ in range(int(sys.argv[2])):
    start = time.perf_counter()
    pickle.loads(data)
    times.append(time.perf_counter() - start)
times.sort()
print(times[len(times) // 2])
"""


def the_function() -> Callable:
    """``train`` of the example, from a module registered to travel by value, as a script's code does."""
    spec = importlib.util.spec_from_file_location("air_bench_train_ddp", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    cloudpickle.register_pickle_by_value(module)
    return getattr(module.train, "func", module.train)  # the plain function under the decorator


def alternate(first: Callable[[], bytes], second: Callable[[], bytes]) -> Tuple[float, float]:
    times: Tuple[List[float], List[float]] = ([], [])
    for index in range(WARM_UPS + REPEATS):
        for which, make in enumerate((first, second)):
            start = time.perf_counter()
            make()
            if index >= WARM_UPS:
                times[which].append(time.perf_counter() - start)
    return statistics.median(times[0]), statistics.median(times[1])


def load_seconds(data: bytes) -> float:
    with tempfile.NamedTemporaryFile(suffix=".pkl", delete=False) as stream:
        stream.write(data)
    try:
        done = subprocess.run(
            [sys.executable, "-c", LOAD, stream.name, str(REPEATS)], capture_output=True, text=True, check=True
        )
        return float(done.stdout.strip())
    finally:
        os.unlink(stream.name)


def main() -> int:
    function = the_function()
    plain = cloudpickle.dumps(function)
    ours = _payload.serialize_function(function)
    assert b"<dynamic-code>" in plain and b"<dynamic-code>" not in ours and b"train_ddp.py" in ours
    anchor, shipped = alternate(lambda: cloudpickle.dumps(function), lambda: _payload.serialize_function(function))
    plain_load, ours_load = load_seconds(plain), load_seconds(ours)
    for key, value in _machine.machine().items():
        print(f"  {key:12s} {value}")
    print(f"  function: train of examples/train_ddp.py, by value; medians of {REPEATS}")
    print(f"  (a) cloudpickle.dumps             {anchor * 1e3:8.3f} ms   {len(plain):7d} bytes")
    print(f"  (b) _payload.serialize_function    {shipped * 1e3:8.3f} ms   {len(ours):7d} bytes")
    print(f"  (c) loading (a) / (b), fresh process  {plain_load * 1e3:.3f} ms / {ours_load * 1e3:.3f} ms")
    difference = shipped - anchor
    verdict = "PASS" if difference <= TARGET_SECONDS else "MISS"
    print(f"  (b) - (a) = {difference * 1e3:+.3f} ms   target <= +{TARGET_SECONDS * 1e3:.0f} ms   {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
