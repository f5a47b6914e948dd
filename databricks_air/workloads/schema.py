"""The workload file's schema, field by field, and its validation: the Databricks CLI's rules, one-to-one.

The tree of :class:`Field` below is the one description of the file: validation walks it, ``--override`` paths are
checked against it, and ``air run -h config.PATH`` prints it. Unknown keys are rejected at every level with the
valid names (and a "did you mean" for a near miss); the first rule broken is reported as ``path: message``.

Where upstream has had two spellings, both are accepted and the older one is reported in the notes: the flat
``code_source: {root_path: ...}`` is current (``type: snapshot`` + ``snapshot:`` is older), so are
``environment.unity_catalog_image`` (``docker_image`` older) and ``compute.pool_id`` (``provisioned_capacity_id``).
Our one addition is ``accelerator_type: CPU`` for CPU ranks.

Our bounds, where upstream states none and a value past them can only be a mistake (or would overflow a timer or
an ``execve``): at most :data:`MAX_NODES` nodes (so 1024 GPUs of a ``GPU_8x`` type) or :data:`MAX_CPU_RANKS` CPU
ranks, :data:`MAX_RETRIES` retries, :data:`MAX_TIMEOUT_MINUTES` minutes (30 days), an environment variable of at
most :data:`MAX_VARIABLE_BYTES` (Linux's limit for one); no string may hold a NUL character (no command, path or
environment variable can); ``root_path`` may not be ``/``, the home folder or a folder above it, and an include
path may not lead out of ``root_path`` (through ``..`` or a symbolic link).
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
import subprocess
from typing import Any, Dict, List, Optional, Sequence, Tuple

from databricks.air.compute import AcceleratorType
from databricks.air.workloads import yaml_values
from databricks.air.workloads.errors import WorkloadFileError
from databricks.air.workloads.workload import (
    DEFAULT_MAX_RETRIES,
    CodeSource,
    Compute,
    ContainerImage,
    Environment,
    GitPin,
    SecretRef,
    Workload,
)

ACCELERATOR_TYPES = ("GPU_1xA10", "GPU_1xH100", "GPU_8xH100", "GPU_8xB300", "CPU")
PRIORITY_CLASSES = ("BEST_EFFORT", "NORMAL", "CRITICAL")
PERMISSION_LEVELS = ("CAN_VIEW", "CAN_MANAGE_RUN", "CAN_MANAGE", "IS_OWNER")
PRINCIPALS = ("user_name", "group_name", "service_principal_name")
MAX_COMMAND_LINES = 1000
MAX_NAME = 100
MAX_TOKEN = 64
MAX_NODES = 128
MAX_CPU_RANKS = 1024
MAX_RETRIES = 100
MAX_TIMEOUT_MINUTES = 30 * 24 * 60
MAX_VARIABLE_BYTES = 128 * 1024 - 1
"""``NAME=value`` of one environment variable, without its final NUL (``MAX_ARG_STRLEN``: past it, ``execve`` fails)."""

_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_BRANCH = re.compile(r"^[\w./-]+$")
_COMMIT = re.compile(r"^[0-9a-fA-F]{4,64}$")
_UUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_UC_IMAGE = re.compile(r"^[^.\s:/]+\.[^.\s:/]+\.[^.\s:/]+(:[^\s]+)?$")

STRING, INTEGER, VERSION, STRINGS, STRING_MAP, FREE_MAP, OBJECT, OBJECTS = (
    "string",
    "integer",
    "integer or string",
    "list of strings",
    "map of strings",
    "map",
    "object",
    "list of objects",
)


@dataclasses.dataclass(frozen=True)
class Field:
    """One key of the file."""

    name: str
    kind: str
    help: str
    required: bool = False
    default: Optional[str] = None
    """The default, as the help shows it."""
    fields: Tuple["Field", ...] = ()
    """The sub-fields of an object, or of each item of a list of objects."""
    older_spelling: bool = False
    """An older spelling upstream still accepts; the notes name the current one."""

    @property
    def free_form(self) -> bool:
        """Any key below is allowed (``parameters``, ``env_variables``, ``secrets``)."""
        return self.kind in (STRING_MAP, FREE_MAP)

    def child(self, name: str) -> Optional["Field"]:
        return next((field for field in self.fields if field.name == name), None)


_GIT = Field(
    "git",
    OBJECT,
    "Snapshot a commit instead of the working tree (through `git archive`).",
    fields=(
        Field(
            "branch", STRING, "The branch's latest commit (characters: letters, digits, `_ . / -`). Not with commit."
        ),
        Field("commit", STRING, "A commit hash. Not with branch."),
        Field("remote", "boolean", "Only `false`: the commit is read from the local repository.", default="false"),
    ),
)
_SNAPSHOT_FIELDS = (
    Field(
        "root_path",
        STRING,
        "The folder to snapshot: `~`, `$VARS` and a `project_root/` prefix expand; a "
        "relative path is taken from the workload file's folder.",
        required=True,
    ),
    Field("include_paths", STRINGS, "Only these paths under root_path (relative, without `..`)."),
    Field("git", OBJECT, _GIT.help, fields=_GIT.fields),
    Field("remote_volume", STRING, "Where Databricks uploads the snapshot: a `/Volumes/...` folder (unused here)."),
)
_IMAGE_FIELDS = (
    Field("url", STRING, "The image.", required=True),
    Field("tag_policy", STRING, "`auto` or `latest`.", default="auto"),
    Field("credentials_scope", STRING, "Secret scope of the registry credentials (with credentials_key, `latest`)."),
    Field("credentials_key", STRING, "Secret key of the registry credentials (with credentials_scope)."),
)

ROOT = Field(
    "",
    OBJECT,
    "A workload file.",
    fields=(
        Field(
            "experiment_name",
            STRING,
            "The MLflow experiment (created if missing); 1-100 letters, digits, `-`, `_`.",
            required=True,
        ),
        Field(
            "compute",
            OBJECT,
            "What the workload runs on.",
            required=True,
            fields=(
                Field(
                    "accelerator_type",
                    STRING,
                    "One of " + ", ".join(ACCELERATOR_TYPES[:-1]) + " (exact case), or CPU for CPU ranks (ours).",
                    required=True,
                ),
                Field(
                    "num_accelerators",
                    INTEGER,
                    "GPUs in all (a multiple of the GPUs per node), or CPU ranks.",
                    required=True,
                ),
                Field("pool_id", STRING, "Reserved capacity to run in (1-255 characters; unused here)."),
                Field("provisioned_capacity_id", STRING, "Older name of pool_id.", older_spelling=True),
                Field("priority_class", STRING, "BEST_EFFORT, NORMAL or CRITICAL; needs pool_id (unused here)."),
            ),
        ),
        Field(
            "environment",
            OBJECT,
            "Python packages, or a container image.",
            fields=(
                Field(
                    "dependencies",
                    STRINGS,
                    "pip requirements (`pkg==1.2`, `-r requirements.txt`, a wheel's path), "
                    "installed into a cached virtual environment over the current one.",
                ),
                Field(
                    "version",
                    VERSION,
                    "The Databricks environment version (an integer, or `databricks_ai_vN`); only with "
                    "dependencies (unused here).",
                    default="4",
                ),
                Field(
                    "unity_catalog_image",
                    STRING,
                    "A container image `catalog.schema.image:tag` (needs a container "
                    "runtime). Not with dependencies or version.",
                ),
                Field(
                    "docker_image",
                    OBJECT,
                    "Older form of unity_catalog_image.",
                    fields=_IMAGE_FIELDS,
                    older_spelling=True,
                ),
            ),
        ),
        # root_path is required in either form, which validation checks itself (the older form has it one level down).
        Field(
            "code_source",
            OBJECT,
            "The folder snapshotted into the run (CODE_SOURCE_PATH).",
            fields=tuple(
                dataclasses.replace(field, required=False, help=field.help + " Required.") if field.required else field
                for field in _SNAPSHOT_FIELDS
            )
            + (
                Field(
                    "type", STRING, "Older form: `snapshot`, with the fields under `snapshot:`.", older_spelling=True
                ),
                Field(
                    "snapshot",
                    OBJECT,
                    "Older form: the snapshot's fields.",
                    fields=_SNAPSHOT_FIELDS,
                    older_spelling=True,
                ),
            ),
        ),
        Field(
            "command",
            STRING,
            "The script run once per node under `bash -euo pipefail` (at most 1000 lines).",
            required=True,
        ),
        Field("env_variables", STRING_MAP, "Environment variables of the command."),
        Field("secrets", STRING_MAP, "Environment variables read from secrets: `NAME: scope/key`."),
        Field("parameters", FREE_MAP, "Anything: written to hyperparameters.yaml, at HYPERPARAMETERS_PATH."),
        Field(
            "max_retries",
            INTEGER,
            "Attempts after a failed or timed-out one (0: none).",
            default=str(DEFAULT_MAX_RETRIES),
        ),
        Field(
            "timeout_minutes",
            INTEGER,
            "Minutes one attempt may run (at least 1); past it the attempt is TIMEDOUT.",
            default="none",
        ),
        Field(
            "idempotency_token",
            STRING,
            "A second submission with the same token returns the first run (1-64 characters).",
        ),
        Field("mlflow_run_name", STRING, "The MLflow run name (default: the experiment name); as experiment_name."),
        Field(
            "mlflow_experiment_directory",
            STRING,
            "A `/Workspace/...` folder for the experiment (Databricks tracking only).",
        ),
        Field(
            "mlflow_artifact_location",
            STRING,
            "A `dbfs:/` or `/Volumes/` artifact location for a new experiment (Databricks tracking only).",
        ),
        Field(
            "permissions",
            OBJECTS,
            "Who may see or manage the run (Databricks only).",
            fields=(
                Field("user_name", STRING, "A user."),
                Field("group_name", STRING, "A group."),
                Field("service_principal_name", STRING, "A service principal."),
                Field("level", STRING, "CAN_VIEW, CAN_MANAGE_RUN, CAN_MANAGE or IS_OWNER.", required=True),
            ),
        ),
        Field(
            "usage_policy_name", STRING, "A usage policy by name (at most 127 characters). Not with usage_policy_id."
        ),
        Field("usage_policy_id", STRING, "A usage policy by id (a UUID). Not with usage_policy_name."),
        Field(
            "schedule",
            OBJECT,
            "Run on a cron schedule (a persistent Databricks job).",
            fields=(
                Field("quartz_cron_expression", STRING, "A Quartz cron expression.", required=True),
                Field("timezone_id", STRING, "A Java time zone id, e.g. `UTC`.", required=True),
                Field("pause_status", STRING, "PAUSED or UNPAUSED.", default="UNPAUSED"),
            ),
        ),
    ),
)


# --- finding fields (for --override and -h config.PATH) -------------------------------------------------------------


def find(path: Sequence[str]) -> Field:
    """The field at a dotted path; a :class:`WorkloadFileError` naming the valid names when there is none.

    Below a free-form map (``parameters``, ``env_variables``, ``secrets``) any path is allowed.
    """
    field = ROOT
    for depth, name in enumerate(path):
        where = ".".join(path[: depth + 1])
        if field.free_form:
            return field
        if field.kind not in (OBJECT,):
            raise WorkloadFileError(
                path=where, problem=f"{'.'.join(path[:depth])} is a {field.kind} and has no sub-fields"
            )
        child = field.child(name)
        if child is None:
            raise WorkloadFileError(path=where, problem=_unknown(name, field))
        field = child
    return field


def _unknown(name: str, parent: Field) -> str:
    names = [field.name for field in parent.fields]
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6) or [n for n in names if n.lower() == name.lower()]
    guess = f" (did you mean {near[0]!r}?)" if near else ""
    return f"unknown field {name!r}{guess}; valid fields here: {', '.join(names)}"


# --- validation -----------------------------------------------------------------------------------------------------


class _Checker:
    """One validation: walks the document, raises at the first broken rule, collects notes on older spellings."""

    def __init__(self, base_dir: str) -> None:
        self.base_dir = base_dir
        self.notes: List[str] = []

    def fail(self, path: str, message: str) -> None:
        raise WorkloadFileError(path=path, problem=message)

    def keys(self, value: Any, field: Field, path: str) -> Dict[str, Any]:
        """``value`` as a mapping of known keys (unknown ones rejected), its required keys present."""
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping of {', '.join(f.name for f in field.fields)}, not {_shown(value)}")
        for key in value:
            if not isinstance(key, str):
                self.fail(path, f"keys must be strings, not {key!r}")
            if key == "_bases_" and not path:
                self.fail(
                    "_bases_",
                    "composing a file from base files (_bases_) is not supported (the Databricks CLI "
                    "does not take it either): merge the files into one",
                )
            if field.child(key) is None:
                self.fail(_join(path, key), _unknown(key, field))
        for child in field.fields:
            if child.required and value.get(child.name) is None:
                self.fail(_join(path, child.name), f"is required ({child.help})")
        return value

    def string(self, value: Any, path: str, *, blank_ok: bool = False) -> str:
        if isinstance(value, (dict, list)) or value is None:
            self.fail(path, f"must be a string, not {_shown(value)}")
        text = yaml_values.scalar_text(value)
        if not blank_ok and not text.strip():
            self.fail(path, "must not be empty")
        if "\0" in text:
            self.fail(
                path,
                f"holds a NUL character (\\0) at character {text.index(chr(0)) + 1}, which no command, "
                "path or environment variable can hold: remove it",
            )
        return text

    def integer(self, value: Any, path: str, minimum: int, maximum: int, why: str = "") -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(path, f"must be an integer, not {_shown(value)}")
        if value < minimum:
            self.fail(path, f"must be at least {minimum}, not {value}")
        if value > maximum:
            self.fail(path, f"must be at most {maximum}, not {value}{why}")
        return int(value)

    def name(self, value: Any, path: str) -> str:
        text = self.string(value, path)
        if len(text) > MAX_NAME:
            self.fail(path, f"must be at most {MAX_NAME} characters, not {len(text)}")
        if not _NAME.fullmatch(text):
            bad = sorted({c for c in text if not re.match(r"[A-Za-z0-9_-]", c)})
            self.fail(
                path,
                f"{text!r} may only hold ASCII letters, digits, '-' and '_' (not {' '.join(map(repr, bad))}):"
                " on Databricks it also names the job's task, which allows no other characters",
            )
        return text

    # --- the sections ---------------------------------------------------------------------------------------------

    def workload(self, document: Any) -> Workload:
        if document is None:
            self.fail("", "the workload file is empty: it needs at least experiment_name, compute and command")
        top = self.keys(document, ROOT, "")
        experiment = self.name(top["experiment_name"], "experiment_name")
        compute = self.compute(top["compute"])
        environment = self.environment(top.get("environment"))
        code_source = self.code_source(top.get("code_source"))
        command = self.string(top["command"], "command")
        if len(command.splitlines()) > MAX_COMMAND_LINES:
            self.fail(
                "command",
                f"has {len(command.splitlines())} lines; at most {MAX_COMMAND_LINES} are allowed "
                "(put the script in a file of code_source and run that)",
            )
        env_variables = self.variables(top.get("env_variables"), "env_variables")
        secrets = self.secrets(top.get("secrets"))
        for name in env_variables:
            if name in secrets:
                self.fail(f"env_variables.{name}", "is also in secrets; a variable comes from one or the other")
        parameters = top.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            self.fail("parameters", f"must be a mapping (written to hyperparameters.yaml), not {_shown(parameters)}")
        max_retries = DEFAULT_MAX_RETRIES
        if top.get("max_retries") is not None:
            max_retries = self.integer(
                top["max_retries"], "max_retries", 0, MAX_RETRIES, " (each retry is a whole run of the command)"
            )
        timeout = None
        if top.get("timeout_minutes") is not None:
            timeout = self.integer(
                top["timeout_minutes"],
                "timeout_minutes",
                1,
                MAX_TIMEOUT_MINUTES,
                " (30 days; leave timeout_minutes out for no limit)",
            )
        token = None
        if top.get("idempotency_token") is not None:
            token = self.string(top["idempotency_token"], "idempotency_token").strip()
            if len(token) > MAX_TOKEN:
                self.fail("idempotency_token", f"must be at most {MAX_TOKEN} characters, not {len(token)}")
        run_name = (
            self.name(top["mlflow_run_name"], "mlflow_run_name") if top.get("mlflow_run_name") is not None else None
        )
        directory = None
        if top.get("mlflow_experiment_directory") is not None:
            directory = self.string(top["mlflow_experiment_directory"], "mlflow_experiment_directory")
            if not (directory == "/Workspace" or directory.startswith("/Workspace/")):
                self.fail("mlflow_experiment_directory", f"must start with /Workspace, not {directory!r}")
        artifacts = None
        if top.get("mlflow_artifact_location") is not None:
            artifacts = self.string(top["mlflow_artifact_location"], "mlflow_artifact_location")
            if artifacts.startswith("/Volumes/"):
                artifacts = "dbfs:" + artifacts
            if not artifacts.startswith("dbfs:/"):
                self.fail("mlflow_artifact_location", f"must be a dbfs:/ URI or a /Volumes/ path, not {artifacts!r}")
        self.permissions(top.get("permissions"))
        self.usage_policy(top)
        schedule = self.schedule(top.get("schedule"))
        return Workload(
            experiment_name=experiment,
            compute=compute,
            command=command,
            environment=environment,
            code_source=code_source,
            env_variables=env_variables,
            secrets=secrets,
            max_retries=max_retries,
            timeout_minutes=timeout,
            idempotency_token=token,
            parameters=parameters,
            mlflow_run_name=run_name,
            mlflow_experiment_directory=directory,
            mlflow_artifact_location=artifacts,
            schedule=schedule,
            document=document,
            base_dir=self.base_dir,
        )

    def compute(self, value: Any) -> Compute:
        section = self.keys(value, ROOT.child("compute"), "compute")  # type: ignore[arg-type]
        kind = self.string(section["accelerator_type"], "compute.accelerator_type")
        if kind not in ACCELERATOR_TYPES:
            near = [t for t in ACCELERATOR_TYPES if t.lower() == kind.lower()]
            near = near or difflib.get_close_matches(kind, ACCELERATOR_TYPES, n=1, cutoff=0.6)
            guess = f" (did you mean {near[0]!r}? the names are case-sensitive)" if near else ""
            self.fail(
                "compute.accelerator_type",
                f"unknown accelerator type {kind!r}{guess}; expected one of "
                f"{', '.join(ACCELERATOR_TYPES[:-1])}, or CPU for CPU ranks",
            )
        per_node = AcceleratorType(kind).gpus_per_node
        count = self.integer(
            section["num_accelerators"],
            "compute.num_accelerators",
            1,
            per_node * MAX_NODES if per_node else MAX_CPU_RANKS,
            f" ({MAX_NODES} nodes of {per_node} GPUs, the most a workload may have)"
            if per_node
            else " (the most CPU ranks a workload may have)",
        )
        if per_node and count % per_node:
            self.fail(
                "compute.num_accelerators",
                f"{kind} nodes have {per_node} GPUs each, so num_accelerators must be "
                f"a multiple of {per_node}, not {count}",
            )
        pool = None
        if section.get("pool_id") is not None and section.get("provisioned_capacity_id") is not None:
            self.fail("compute.provisioned_capacity_id", "is the older name of pool_id: give only pool_id")
        for name in ("pool_id", "provisioned_capacity_id"):
            if section.get(name) is not None:
                pool = self.string(section[name], f"compute.{name}")
                if len(pool) > 255:
                    self.fail(f"compute.{name}", f"must be 1-255 characters, not {len(pool)}")
                if name == "provisioned_capacity_id":
                    self.notes.append(
                        "compute.provisioned_capacity_id is the older spelling; the current one is compute.pool_id"
                    )
        priority = None
        if section.get("priority_class") is not None:
            priority = self.string(section["priority_class"], "compute.priority_class")
            if priority not in PRIORITY_CLASSES:
                self.fail("compute.priority_class", f"must be one of {', '.join(PRIORITY_CLASSES)}, not {priority!r}")
            if pool is None:
                self.fail(
                    "compute.priority_class", "needs compute.pool_id: a priority applies within reserved capacity"
                )
        return Compute(kind, count, pool, priority)

    def environment(self, value: Any) -> Environment:
        if value is None:
            return Environment()
        section = self.keys(value, ROOT.child("environment"), "environment")  # type: ignore[arg-type]
        dependencies = None
        if section.get("dependencies") is not None:
            raw = section["dependencies"]
            if not isinstance(raw, list):
                self.fail(
                    "environment.dependencies",
                    f"must be a list of requirements, not {_shown(raw)} (a "
                    "requirements file goes in as one entry: dependencies: [-r requirements.txt])",
                )
            dependencies = tuple(self.string(item, f"environment.dependencies[{i}]") for i, item in enumerate(raw))
        version = None
        if section.get("version") is not None:
            if dependencies is None:
                self.fail(
                    "environment.version",
                    "is only allowed with environment.dependencies (Databricks refuses it "
                    "otherwise); add dependencies: [] to keep the version",
                )
            version = self.version(section["version"])
        image = None
        if section.get("unity_catalog_image") is not None and section.get("docker_image") is not None:
            self.fail("environment.docker_image", "is the older form of unity_catalog_image: give only one")
        if section.get("unity_catalog_image") is not None:
            url = self.string(section["unity_catalog_image"], "environment.unity_catalog_image")
            if not _UC_IMAGE.fullmatch(url):
                self.fail("environment.unity_catalog_image", f"must be catalog.schema.image[:tag], not {url!r}")
            image = ContainerImage(url)
        elif section.get("docker_image") is not None:
            image = self.docker_image(section["docker_image"])
            self.notes.append(
                "environment.docker_image is the older form; the current one is environment.unity_catalog_image"
            )
        if image is not None and (dependencies is not None or version is not None):
            which = "unity_catalog_image" if section.get("unity_catalog_image") is not None else "docker_image"
            self.fail(
                f"environment.{which}",
                "cannot be combined with dependencies or version: the image brings its own environment",
            )
        return Environment(dependencies, version, image)

    def version(self, value: Any) -> str:
        path = "environment.version"
        if isinstance(value, bool) or isinstance(value, (dict, list, float)):
            self.fail(path, f"must be an integer or databricks_ai_vN, not {_shown(value)}")
        if isinstance(value, int):
            if value < 1:
                self.fail(path, f"must be at least 1, not {value}")
            return str(int(value))
        text = self.string(value, path)
        if text.isdigit() and int(text) >= 1:
            return text
        match = re.fullmatch(r"databricks_ai_v(\d+)", text)
        if not match or int(match.group(1)) < 5:
            self.fail(path, f"must be an integer or databricks_ai_vN with N at least 5, not {text!r}")
        return text

    def docker_image(self, value: Any) -> ContainerImage:
        path = "environment.docker_image"
        section = self.keys(value, ROOT.child("environment").child("docker_image"), path)  # type: ignore[union-attr, arg-type]
        url = self.string(section["url"], f"{path}.url")
        policy = self.string(section.get("tag_policy", "auto"), f"{path}.tag_policy")
        if policy not in ("auto", "latest"):
            self.fail(f"{path}.tag_policy", f"must be auto or latest, not {policy!r}")
        scope, key = section.get("credentials_scope"), section.get("credentials_key")
        if (scope is None) != (key is None):
            missing = "credentials_key" if key is None else "credentials_scope"
            self.fail(f"{path}.{missing}", "is required with the other credentials field: give both or neither")
        if scope is not None and policy != "latest":
            self.fail(f"{path}.credentials_scope", "registry credentials need tag_policy: latest")
        return ContainerImage(
            url,
            policy,
            self.string(scope, f"{path}.credentials_scope") if scope is not None else None,
            self.string(key, f"{path}.credentials_key") if key is not None else None,
        )

    def code_source(self, value: Any) -> Optional[CodeSource]:
        if value is None:
            return None
        field = ROOT.child("code_source")
        section = self.keys(value, field, "code_source")  # type: ignore[arg-type]
        flat = [name for name in ("root_path", "include_paths", "git", "remote_volume") if name in section]
        if "type" in section or "snapshot" in section:
            if flat:
                self.fail(
                    f"code_source.{flat[0]}",
                    "mixes the flat form with the older type/snapshot form: use one "
                    "(the current form is flat: code_source: {root_path: ...})",
                )
            kind = self.string(section.get("type"), "code_source.type") if section.get("type") is not None else None
            if kind != "snapshot":
                self.fail(
                    "code_source.type",
                    f"must be snapshot, not {kind!r}" if kind else "is required with snapshot: (type: snapshot)",
                )
            if section.get("snapshot") is None:
                self.fail("code_source.snapshot", "is required with type: snapshot")
            self.notes.append(
                "code_source.type/snapshot is the older form; the current one is flat: "
                "code_source: {root_path: ..., include_paths: [...]}"
            )
            path = "code_source.snapshot"
            section = self.keys(section["snapshot"], field.child("snapshot"), path)  # type: ignore[arg-type, union-attr]
        else:
            path = "code_source"
            if section.get("root_path") is None:
                self.fail("code_source.root_path", "is required (the folder to snapshot, e.g. root_path: .)")
        root = self.root_path(self.string(section["root_path"], f"{path}.root_path"), f"{path}.root_path")
        git = self.git(section.get("git"), f"{path}.git") if section.get("git") is not None else None
        include = None
        if section.get("include_paths") is not None:
            raw = section["include_paths"]
            if not isinstance(raw, list) or not raw:
                self.fail(f"{path}.include_paths", f"must be a non-empty list of relative paths, not {_shown(raw)}")
            include = tuple(
                self.include_path(item, root, f"{path}.include_paths[{i}]", on_disk=git is None)
                for i, item in enumerate(raw)
            )
        volume = None
        if section.get("remote_volume") is not None:
            volume = self.string(section["remote_volume"], f"{path}.remote_volume")
            if not volume.startswith("/Volumes/"):
                self.fail(f"{path}.remote_volume", f"must start with /Volumes/, not {volume!r}")
        return CodeSource(root, include, git, volume, field=path)

    def root_path(self, text: str, path: str) -> str:
        expanded = os.path.expandvars(os.path.expanduser(text))
        if expanded == "project_root" or expanded.startswith("project_root/"):
            expanded = os.path.join(project_root(self.base_dir), expanded[len("project_root/") :])
        resolved = os.path.normpath(os.path.join(self.base_dir, expanded))
        if not os.path.isdir(resolved):
            what = "is not a directory" if os.path.exists(resolved) else "does not exist"
            self.fail(
                path, f"{resolved} {what} (relative paths are taken from the workload file's folder, {self.base_dir})"
            )
        real = os.path.realpath(resolved)
        shown = resolved if real == resolved else f"{resolved} (that is, {real})"
        if real == os.path.realpath(os.sep):
            self.fail(
                path,
                f"{shown} is the whole file system, which the snapshot would copy into every run: "
                "point root_path at your project's folder (root_path: . is the workload file's folder)",
            )
        home = os.path.realpath(os.path.expanduser("~"))
        if _contains(real, home):
            where = "your home folder" if real == home else f"a folder that holds your home folder ({home})"
            self.fail(
                path,
                f"{shown} is {where}, which the snapshot would copy into every run: point root_path at "
                "your project's folder (root_path: . is the workload file's folder)",
            )
        return resolved

    def include_path(self, value: Any, root: str, path: str, on_disk: bool = True) -> str:
        """A path of ``include_paths``: relative, without ``..``; and, for a working-tree snapshot (``on_disk``), a
        path that exists under ``root`` and stays there once its symbolic links are followed (a git snapshot's paths
        are looked for in the commit, by :func:`.snapshot.survey`)."""
        text = self.string(value, path)
        parts = text.replace("\\", "/").split("/")
        if os.path.isabs(text) or ".." in parts:
            self.fail(path, f"must be a path relative to root_path, without '..', not {text!r}")
        relative = os.path.normpath(text)
        if on_disk:
            where = os.path.join(root, relative)
            if not os.path.lexists(where):
                self.fail(path, f"{text!r} does not exist under root_path ({root})")
            real, real_root = os.path.realpath(where), os.path.realpath(root)
            if not _contains(real_root, real):
                self.fail(
                    path,
                    f"{text!r} leads out of root_path, through a symbolic link, to {real}: only what is "
                    "under root_path can be included (copy it there, or point root_path higher)",
                )
        return relative

    def git(self, value: Any, path: str) -> GitPin:
        section = self.keys(value, _GIT, path)
        branch, commit = section.get("branch"), section.get("commit")
        if (branch is None) == (commit is None):
            self.fail(path, "needs exactly one of branch or commit")
        if section.get("remote") is not None and section["remote"] is not False:
            self.fail(
                f"{path}.remote",
                f"only false is supported (the commit is read from the local repository), "
                f"not {_shown(section['remote'])}",
            )
        if branch is not None:
            branch = self.string(branch, f"{path}.branch")
            if not _BRANCH.fullmatch(branch):
                self.fail(f"{path}.branch", f"{branch!r} may only hold letters, digits and _ . / -")
        if commit is not None:
            commit = self.string(commit, f"{path}.commit")
            if not _COMMIT.fullmatch(commit):
                self.fail(f"{path}.commit", f"must be a commit hash (hexadecimal), not {commit!r}")
        return GitPin(branch, commit)

    def variables(self, value: Any, path: str) -> Dict[str, str]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            self.fail(path, f"must be a mapping of NAME: value, not {_shown(value)}")
        variables = {}
        for name, item in value.items():
            where = _join(path, name if isinstance(name, str) else repr(name))
            if not isinstance(name, str) or not _VARIABLE.fullmatch(name):
                self.fail(
                    where, "is not a valid environment variable name (letters, digits and _, not starting with a digit)"
                )
            variables[name] = self.string(item, where, blank_ok=True)
            size = len(f"{name}={variables[name]}".encode())
            if size > MAX_VARIABLE_BYTES:
                self.fail(
                    where,
                    f"is {size} bytes; an environment variable may hold at most {MAX_VARIABLE_BYTES} "
                    "(NAME=value; Linux refuses to start a command with a longer one): put the value in a file "
                    "of code_source",
                )
        return variables

    def secrets(self, value: Any) -> Dict[str, SecretRef]:
        refs = {}
        for name, text in self.variables(value, "secrets").items():
            parts = text.split("/")
            if len(parts) != 2 or not all(part.strip() for part in parts):
                self.fail(f"secrets.{name}", f"must be scope/key (exactly one '/', both parts non-empty), not {text!r}")
            refs[name] = SecretRef(parts[0], parts[1])
        return refs

    def permissions(self, value: Any) -> None:
        if value is None:
            return
        field = ROOT.child("permissions")
        if not isinstance(value, list):
            self.fail(
                "permissions",
                f"must be a list of {{user_name|group_name|service_principal_name, level}}, not {_shown(value)}",
            )
        for index, item in enumerate(value):
            path = f"permissions[{index}]"
            entry = self.keys(item, field, path)  # type: ignore[arg-type]
            given = [name for name in PRINCIPALS if entry.get(name) is not None]
            if len(given) != 1:
                self.fail(path, f"needs exactly one of {', '.join(PRINCIPALS)}, not {len(given)}")
            self.string(entry[given[0]], f"{path}.{given[0]}")
            level = self.string(entry["level"], f"{path}.level")
            if level not in PERMISSION_LEVELS:
                self.fail(f"{path}.level", f"must be one of {', '.join(PERMISSION_LEVELS)}, not {level!r}")

    def usage_policy(self, top: Dict[str, Any]) -> None:
        name, policy_id = top.get("usage_policy_name"), top.get("usage_policy_id")
        if name is not None and policy_id is not None:
            self.fail("usage_policy_id", "cannot be combined with usage_policy_name: give one")
        if name is not None:
            text = self.string(name, "usage_policy_name")
            if len(text) > 127:
                self.fail("usage_policy_name", f"must be at most 127 characters, not {len(text)}")
        if policy_id is not None:
            text = self.string(policy_id, "usage_policy_id")
            if not _UUID.fullmatch(text):
                self.fail("usage_policy_id", f"must be a UUID, not {text!r}")

    def schedule(self, value: Any) -> Optional[Dict[str, Any]]:
        if value is None:
            return None
        section = self.keys(value, ROOT.child("schedule"), "schedule")  # type: ignore[arg-type]
        self.string(section["quartz_cron_expression"], "schedule.quartz_cron_expression")
        self.string(section["timezone_id"], "schedule.timezone_id")
        if section.get("pause_status") is not None:
            status = self.string(section["pause_status"], "schedule.pause_status")
            if status not in ("PAUSED", "UNPAUSED"):
                self.fail("schedule.pause_status", f"must be PAUSED or UNPAUSED, not {status!r}")
        return yaml_values.plain(section)


def validate(document: Any, base_dir: str) -> Tuple[Workload, List[str]]:
    """Check a parsed workload file against every rule; return it typed, and notes on older spellings.

    Raises:
        WorkloadFileError: the first broken rule, as ``path: message``.
    """
    checker = _Checker(os.path.abspath(base_dir))
    return checker.workload(document), checker.notes


def project_root(folder: str) -> str:
    """What ``project_root/`` means: the top of the git repository holding ``folder``, else ``folder`` itself."""
    try:
        done = subprocess.run(
            ["git", "-C", folder, "rev-parse", "--show-toplevel"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return folder
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else folder


def _contains(folder: str, path: str) -> bool:
    """Whether ``path`` is ``folder`` or below it (both absolute and resolved)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _join(path: str, key: str) -> str:
    """A field's path: ``parent.key``, the key quoted when it holds a space or a character not printable."""
    shown = yaml_values.key_text(key)
    return f"{path}.{shown}" if path else shown


def _shown(value: Any) -> str:
    if value is None:
        return "nothing (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, (int, float)):
        return f"the number {yaml_values.scalar_text(value)}"
    return repr(value)


def help_text(path: Sequence[str]) -> str:
    """``air run -h config[.PATH]``: the fields at a path, with their kinds, defaults and rules."""
    field = find(path) if path else ROOT
    title = ".".join(path) or "workload file"
    lines = [f"{title} ({field.kind}): {field.help}"]
    for child in field.fields:
        if child.older_spelling:
            continue
        marks = ["required"] if child.required else []
        if child.default is not None:
            marks.append(f"default {child.default}")
        suffix = f" [{', '.join(marks)}]" if marks else ""
        lines.append(f"  {child.name} ({child.kind}){suffix}: {child.help}")
    older = [child.name for child in field.fields if child.older_spelling]
    if older:
        lines.append(f"  older spellings, still accepted: {', '.join(older)}")
    return "\n".join(lines)
