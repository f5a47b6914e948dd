"""``<temp>/databricks-air-<uid>``: the folder of this user's node-wide state (GPU leases, Ray's temp folders).

Every process of the user finds it at the same place; nobody else may enter it (0700). A folder of that name that
is someone else's, or a link, is refused: whoever made it could read or replace what we keep there.
"""

from __future__ import annotations

import os
import stat
import tempfile

from databricks.air.exceptions import RuntimeConfigurationError


def user_folder(*parts: str) -> str:
    """``<temp>/databricks-air-<uid>/<parts...>``, made 0700 where missing. The path stays short: Ray's Unix
    sockets live under it, and a socket's path holds 107 bytes at most."""
    folder = os.path.join(tempfile.gettempdir(), f"databricks-air-{os.getuid()}")
    _private(folder)
    for part in parts:
        folder = os.path.join(folder, part)
        _private(folder)
    return folder


def _private(folder: str) -> None:
    try:
        os.mkdir(folder, 0o700)
    except FileExistsError:
        pass
    status = os.lstat(folder)
    if not stat.S_ISDIR(status.st_mode) or status.st_uid != os.getuid():
        raise RuntimeConfigurationError(
            f"{folder} is not a folder of this user's, so what databricks.air keeps there could not be private; "
            "remove it, or set TMPDIR to another temp folder"
        )
    if stat.S_IMODE(status.st_mode) != 0o700:
        os.chmod(folder, 0o700)
