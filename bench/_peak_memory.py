"""Run a command and write the peak resident memory of its processes (KiB) to a file: ``python _peak_memory.py
OUT -- CMD...``; exits with the command's exit code.

A benchmark cannot read a command's peak memory from its own ``wait4``: a child forked from a large benchmark
process starts with the benchmark's pages resident, and Linux carries that high-water mark across ``exec``. This
small process forks the command instead, so what it reports is the command's own.
"""

from __future__ import annotations

import resource
import subprocess
import sys


def main() -> int:
    out, separator, *command = sys.argv[1:]
    assert separator == "--", "usage: _peak_memory.py OUT -- CMD..."
    code = subprocess.call(command)
    with open(out, "w") as stream:
        stream.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
    return code


if __name__ == "__main__":
    raise SystemExit(main())
