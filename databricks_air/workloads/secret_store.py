"""The local secret store: where ``secrets: {HF_TOKEN: ml_team/hf_token}`` finds its values on this machine.

A ``scope/key`` reference is looked up, in order:

1. in the environment variable ``DATABRICKS_AIR_SECRET_<SCOPE>__<KEY>`` (upper case, other characters as ``_``:
   ``ml_team/hf_token`` is ``DATABRICKS_AIR_SECRET_ML_TEAM__HF_TOKEN``), for CI systems that inject secrets so;
2. in the file ``~/.air/secrets/<scope>/<key>`` (``DATABRICKS_AIR_HOME`` moves it), which must be readable by
   its owner only (mode 0600, in a folder of mode 0700), as ``ssh`` requires of private keys. One trailing newline
   is dropped. ``air secrets put scope/key`` writes one (the value read from stdin, or typed without echo).

A value becomes an environment variable, so it must be UTF-8 text without a NUL byte, of at most
:data:`MAX_VALUE_BYTES`; a file that is not one (or not a regular file) is refused naming the secret and why, both
when it is stored and when a workload uses it.

Values go only into the command's environment, and only those the workload names: the submitter's other
``DATABRICKS_AIR_SECRET_*`` variables never reach the command (:func:`without_secret_variables`). The run's saved
configuration holds the references, and the supervisor replaces every secret value it knows (the named ones and every
``DATABRICKS_AIR_SECRET_*`` value it was given, :func:`known_values`) with ``[REDACTED]`` in the command's output.
"""

from __future__ import annotations

import os
import re
import stat
from typing import Dict, List, Mapping, Optional, Tuple

from databricks.air import _variables
from databricks.air.workloads import paths
from databricks.air.workloads.errors import InvalidArguments, WorkloadError
from databricks.air.workloads.registry import write_atomically
from databricks.air.workloads.workload import SecretRef

VARIABLE_PREFIX = _variables.SECRET_PREFIX
MAX_VALUE_BYTES = 128 * 1024 - 1
"""The most one environment variable can hold on Linux (``MAX_ARG_STRLEN``, less the ``NAME=`` and the NUL)."""
_PART = re.compile(r"^[A-Za-z0-9._-]+$")


class SecretNotFound(WorkloadError):
    """A secret the workload names is in neither the environment nor the store."""

    exit_status = 2
    code = "INVALID_ARGS"


def variable_name(ref: SecretRef) -> str:
    """The environment variable that can hold ``ref``."""

    def part(text: str) -> str:
        return re.sub(r"[^A-Za-z0-9]", "_", text).upper()

    return f"{VARIABLE_PREFIX}{part(ref.scope)}__{part(ref.key)}"


def without_secret_variables(environ: Mapping[str, str]) -> Dict[str, str]:
    """``environ`` without the secret store's variables (``DATABRICKS_AIR_SECRET_*``): what a command may inherit."""
    return {name: value for name, value in environ.items() if not name.startswith(VARIABLE_PREFIX)}


def known_values(environ: Mapping[str, str], named: Mapping[str, str]) -> List[str]:
    """Every secret value this process knows: the workload's (``named``) and each ``DATABRICKS_AIR_SECRET_*`` value
    of ``environ``, for redaction."""
    return [*named.values(), *(value for name, value in environ.items() if name.startswith(VARIABLE_PREFIX))]


def secret_path(ref: SecretRef) -> str:
    """The file that can hold ``ref``."""
    for part in (ref.scope, ref.key):
        if not _PART.match(part) or part in (".", ".."):
            raise InvalidArguments(f"secret {ref}: scope and key may hold letters, digits, '.', '_' and '-' only")
    return os.path.join(paths.secrets_dir(), ref.scope, ref.key)


def parse_ref(text: str) -> SecretRef:
    parts = text.split("/")
    if len(parts) != 2 or not all(parts):
        raise InvalidArguments(f"a secret is named scope/key, not {text!r}")
    return SecretRef(parts[0], parts[1])


def decode(ref: SecretRef, data: bytes, where: str) -> str:
    """The text of a secret's value (``where``: the file or stdin, for messages); a :class:`WorkloadError` saying why
    it cannot be an environment variable's value."""
    try:
        value = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise WorkloadError(
            f"secret {ref}: {where} is not UTF-8 text (byte {error.start} is "
            f"0x{data[error.start]:02x}), and a secret becomes an environment variable, which holds "
            f"text: store binary values encoded, e.g. base64 FILE | air secrets put {ref}"
        ) from None
    if "\0" in value:
        raise WorkloadError(
            f"secret {ref}: {where} holds a NUL byte (at byte {data.index(0)}), which no environment "
            f"variable can hold: store it encoded, e.g. base64 FILE | air secrets put {ref}"
        )
    if len(data) > MAX_VALUE_BYTES:
        raise WorkloadError(
            f"secret {ref}: {where} is more than {MAX_VALUE_BYTES} bytes, the most an environment "
            "variable can hold: keep large secrets in a file that the command reads"
        )
    return value


def lookup(ref: SecretRef, environ: Mapping[str, str]) -> Optional[str]:
    """The value of ``ref``, or ``None`` when neither place has it."""
    variable = variable_name(ref)
    if variable in environ:
        return environ[variable]
    path = secret_path(ref)
    try:  # without blocking, and checked on what was opened: a FIFO would wait for a writer forever
        descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        return None
    except OSError as error:
        raise WorkloadError(f"secret {ref}: {path} cannot be read ({error.strerror or error})") from None
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            raise WorkloadError(f"secret {ref}: {path} is not a regular file")
        if info.st_mode & 0o077:
            raise WorkloadError(
                f"secret {ref}: {path} may be read by others (mode {stat.S_IMODE(info.st_mode):o}); "
                f"make it private: chmod 600 {path}"
            )
        if hasattr(os, "getuid") and info.st_uid != os.getuid():
            raise WorkloadError(f"secret {ref}: {path} belongs to another user")
        data = b""
        while len(data) < MAX_VALUE_BYTES + 2:  # the value, a newline, and one byte to see that it is too long
            chunk = os.read(descriptor, MAX_VALUE_BYTES + 2 - len(data))
            if not chunk:
                break
            data += chunk
    finally:
        os.close(descriptor)
    return decode(ref, data[:-1] if data.endswith(b"\n") else data, path)


def resolve(secrets: Mapping[str, SecretRef], environ: Mapping[str, str]) -> Dict[str, str]:
    """``NAME -> value`` for every secret of a workload; :class:`SecretNotFound` for the first missing one, a
    :class:`WorkloadError` naming the field for one that cannot be read or used."""
    values = {}
    for name, ref in secrets.items():
        try:
            value = lookup(ref, environ)
        except SecretNotFound:
            raise
        except WorkloadError as error:
            raise WorkloadError(f"secrets.{name}: {error}") from None
        if value is None:
            raise SecretNotFound(
                f"secrets.{name}: the secret {ref} is not set on this machine. Store it with "
                f"`air secrets put {ref}` (written to {secret_path(ref)}, mode 0600), or set the environment "
                f"variable {variable_name(ref)}"
            )
        values[name] = value
    return values


def put(ref: SecretRef, value: str) -> str:
    """Store a secret (folders 0700, file 0600); return the file's path."""
    path = secret_path(ref)
    for folder in (paths.air_home(), paths.secrets_dir(), os.path.dirname(path)):
        os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(os.path.dirname(path), 0o700)
    write_atomically(path, value.encode(), mode=0o600)
    return path


def delete(ref: SecretRef) -> bool:
    """Remove a stored secret; False when there was none."""
    try:
        os.unlink(secret_path(ref))
    except FileNotFoundError:
        return False
    return True


def stored() -> List[Tuple[SecretRef, str]]:
    """Every secret in the store (references and paths, never values), sorted."""
    root = paths.secrets_dir()
    found = []
    for scope in sorted(os.listdir(root)) if os.path.isdir(root) else []:
        folder = os.path.join(root, scope)
        if os.path.isdir(folder):
            found += [
                (SecretRef(scope, key), os.path.join(folder, key))
                for key in sorted(os.listdir(folder))
                if not key.startswith(".tmp-")
            ]
    return found
