"""Unpack wheels into a directory that goes on PYTHONPATH, for an interpreter without pip.

``python bench/_unpack_wheels.py TARGET WHEEL...``: a wheel is a zip of its importable files plus a
``<name>.dist-info`` folder; files under ``<name>.data/purelib`` and ``platlib`` belong beside them, while scripts and
headers are not needed to import anything, so they are left out. Used by ``bench/gpu_check.sh``.
"""

from __future__ import annotations

import os
import shutil
import sys
import zipfile


def unpack(wheel: str, target: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        for member in archive.infolist():
            parts = member.filename.split("/")
            if parts[0].endswith(".data"):
                if len(parts) < 3 or parts[1] not in ("purelib", "platlib"):
                    continue
                parts = parts[2:]
            if member.is_dir() or not parts or ".." in parts:
                continue
            destination = os.path.join(target, *parts)
            os.makedirs(os.path.dirname(destination), exist_ok=True)
            with archive.open(member) as source, open(destination, "wb") as sink:
                shutil.copyfileobj(source, sink)
            mode = member.external_attr >> 16
            if mode & 0o111:
                os.chmod(destination, 0o755)


def main() -> None:
    target, wheels = sys.argv[1], sys.argv[2:]
    os.makedirs(target, exist_ok=True)
    for wheel in wheels:
        unpack(wheel, target)
        print(f"unpacked {os.path.basename(wheel)}")


if __name__ == "__main__":
    main()
