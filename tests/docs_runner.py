"""Run one documentation page's code blocks, in page order, in this fresh process: ``python docs_runner.py BLOCKS``.

``BLOCKS`` is a JSON file: ``{"page": "docs/x.md", "blocks": [{"number", "line", "language", "code"}, ...]}``.
Python blocks run in one namespace, as a notebook's cells would (``__name__ == "__main__"``, so functions defined in
them travel to ranks by value); bash blocks run with ``bash -e`` in the working directory. Each block's output is
preceded by a banner line. On the first failure the runner prints what failed and exits with status 1.
"""

from __future__ import annotations

import json
import linecache
import os
import signal
import subprocess
import sys
import traceback
from typing import Any, Dict

BANNER = "=" * 8


def run_python(code: str, filename: str, namespace: Dict[str, Any]) -> None:
    """Execute one block; the source is registered so that tracebacks show its lines."""
    linecache.cache[filename] = (len(code), None, code.splitlines(keepends=True), filename)
    exec(compile(code, filename, "exec"), namespace)


def run_bash(code: str) -> int:
    """Run one block with ``bash -e``; return its exit status."""
    sys.stdout.flush()
    sys.stderr.flush()
    return subprocess.run(["bash", "-e", "-c", code], stdin=subprocess.DEVNULL).returncode


def main(blocks_path: str) -> int:
    with open(blocks_path, encoding="utf-8") as stream:
        spec = json.load(stream)
    page = spec["page"]
    # As in a notebook kernel, Ctrl-C raises KeyboardInterrupt; a shell that starts us in the background would
    # otherwise hand us SIGINT ignored, and the pages' interrupt examples would wait for nothing.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    namespace: Dict[str, Any] = {"__name__": "__main__", "__builtins__": __builtins__}
    for block in spec["blocks"]:
        where = f"{page}, block {block['number']} (line {block['line']}, {block['language']})"
        print(f"{BANNER} {where}", flush=True)
        if block["language"] == "python":
            try:
                run_python(block["code"], f"{page}:block-{block['number']}", namespace)
            except BaseException:  # noqa: BLE001 - report any failure of the reader-facing code
                traceback.print_exc()
                print(f"{BANNER} FAILED: {where}", flush=True)
                return 1
        else:
            status = run_bash(block["code"])
            if status != 0:
                print(f"{BANNER} FAILED: {where}: bash exited with status {status}", flush=True)
                return 1
        sys.stdout.flush()
        sys.stderr.flush()
    return 0


if __name__ == "__main__":
    # The pages' code must not see this helper's folder as its first import path.
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)
    sys.exit(main(sys.argv[1]))
