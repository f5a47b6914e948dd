"""The workload file's schema, rule by rule (one case each), its spellings, and ``--override``."""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from databricks.air.workloads import loading, schema
from databricks.air.workloads.errors import InvalidArguments, WorkloadFileError

from workload_support import air, envelope

BASE: Dict[str, Any] = {
    "experiment_name": "exp",
    "compute": {"accelerator_type": "CPU", "num_accelerators": 2},
    "command": "true",
}


def _with(changes: Dict[str, Any]) -> Dict[str, Any]:
    """BASE with dotted paths set (``None`` removes a key)."""
    document = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = document
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return document


# (case id, changes to BASE, the error's path, a fragment of its message)
BROKEN_RULES = [
    ("experiment-required", {"experiment_name": None}, "experiment_name", "is required"),
    ("experiment-empty", {"experiment_name": ""}, "experiment_name", "must not be empty"),
    ("experiment-too-long", {"experiment_name": "x" * 101}, "experiment_name", "at most 100 characters"),
    ("experiment-no-dots", {"experiment_name": "my.exp"}, "experiment_name", "only hold ASCII letters, digits"),
    ("experiment-not-a-string", {"experiment_name": ["a"]}, "experiment_name", "must be a string"),
    ("unknown-top-level-key", {"comand": "x"}, "comand", "did you mean 'command'"),
    ("bases-not-supported", {"_bases_": ["base.yaml"]}, "_bases_", "not supported"),
    ("compute-required", {"compute": None}, "compute", "is required"),
    ("compute-a-mapping", {"compute": "CPU"}, "compute", "must be a mapping"),
    ("type-required", {"compute.accelerator_type": None}, "compute.accelerator_type", "is required"),
    (
        "type-case-sensitive",
        {"compute.accelerator_type": "gpu_8xh100"},
        "compute.accelerator_type",
        "did you mean 'GPU_8xH100'? the names are case-sensitive",
    ),
    ("type-unknown", {"compute.accelerator_type": "TPU_v5"}, "compute.accelerator_type", "unknown accelerator type"),
    ("count-required", {"compute.num_accelerators": None}, "compute.num_accelerators", "is required"),
    ("count-positive", {"compute.num_accelerators": 0}, "compute.num_accelerators", "at least 1, not 0"),
    ("count-an-integer", {"compute.num_accelerators": "two"}, "compute.num_accelerators", "must be an integer"),
    ("count-not-a-boolean", {"compute.num_accelerators": True}, "compute.num_accelerators", "must be an integer"),
    (
        "count-per-node-multiple",
        {"compute.accelerator_type": "GPU_8xH100", "compute.num_accelerators": 12},
        "compute.num_accelerators",
        "multiple of 8, not 12",
    ),
    ("unknown-compute-key", {"compute.gpus": 2}, "compute.gpus", "valid fields here: accelerator_type"),
    ("pool-length", {"compute.pool_id": "p" * 256}, "compute.pool_id", "1-255 characters"),
    (
        "pool-two-spellings",
        {"compute.pool_id": "a", "compute.provisioned_capacity_id": "b"},
        "compute.provisioned_capacity_id",
        "older name of pool_id",
    ),
    ("priority-needs-pool", {"compute.priority_class": "NORMAL"}, "compute.priority_class", "needs compute.pool_id"),
    (
        "priority-values",
        {"compute.pool_id": "p", "compute.priority_class": "HIGH"},
        "compute.priority_class",
        "BEST_EFFORT, NORMAL, CRITICAL",
    ),
    (
        "dependencies-a-list",
        {"environment.dependencies": "requirements.txt"},
        "environment.dependencies",
        "must be a list",
    ),
    (
        "dependency-a-string",
        {"environment.dependencies": [{"a": 1}]},
        "environment.dependencies[0]",
        "must be a string",
    ),
    ("version-needs-dependencies", {"environment.version": 5}, "environment.version", "add dependencies: []"),
    (
        "version-form",
        {"environment.dependencies": [], "environment.version": "databricks_ai_v4"},
        "environment.version",
        "N at least 5",
    ),
    (
        "image-excludes-dependencies",
        {"environment.dependencies": ["x"], "environment.docker_image": {"url": "i"}},
        "environment.docker_image",
        "cannot be combined with dependencies",
    ),
    (
        "docker-url-required",
        {"environment.docker_image": {"tag_policy": "auto"}},
        "environment.docker_image.url",
        "is required",
    ),
    (
        "docker-tag-policy",
        {"environment.docker_image": {"url": "i", "tag_policy": "newest"}},
        "environment.docker_image.tag_policy",
        "auto or latest",
    ),
    (
        "docker-credentials-together",
        {"environment.docker_image": {"url": "i", "tag_policy": "latest", "credentials_scope": "s"}},
        "environment.docker_image.credentials_key",
        "give both or neither",
    ),
    (
        "docker-credentials-need-latest",
        {"environment.docker_image": {"url": "i", "credentials_scope": "s", "credentials_key": "k"}},
        "environment.docker_image.credentials_scope",
        "tag_policy: latest",
    ),
    (
        "uc-image-form",
        {"environment.unity_catalog_image": "just-a-name"},
        "environment.unity_catalog_image",
        "catalog.schema.image[:tag]",
    ),
    (
        "uc-image-and-docker",
        {"environment.unity_catalog_image": "c.s.i:1", "environment.docker_image": {"url": "i"}},
        "environment.docker_image",
        "older form of unity_catalog_image",
    ),
    ("command-required", {"command": None}, "command", "is required"),
    ("command-blank", {"command": "  \n "}, "command", "must not be empty"),
    ("command-1000-lines", {"command": "true\n" * 1001}, "command", "at most 1000"),
    ("variables-a-mapping", {"env_variables": ["A=1"]}, "env_variables", "must be a mapping"),
    ("variable-name", {"env_variables": {"1X": "a"}}, "env_variables.1X", "not a valid environment variable name"),
    (
        "variable-also-secret",
        {"env_variables": {"TOKEN": "a"}, "secrets": {"TOKEN": "s/k"}},
        "env_variables.TOKEN",
        "is also in secrets",
    ),
    ("secret-one-slash", {"secrets": {"TOKEN": "scope-key"}}, "secrets.TOKEN", "exactly one '/'"),
    ("secret-two-slashes", {"secrets": {"TOKEN": "a/b/c"}}, "secrets.TOKEN", "exactly one '/'"),
    ("secret-empty-part", {"secrets": {"TOKEN": "scope/"}}, "secrets.TOKEN", "both parts non-empty"),
    ("root-required", {"code_source": {"include_paths": ["a"]}}, "code_source.root_path", "is required"),
    ("root-exists", {"code_source": {"root_path": "no-such-folder"}}, "code_source.root_path", "does not exist"),
    (
        "root-a-directory",
        {"code_source": {"root_path": "workload.yaml"}},
        "code_source.root_path",
        "is not a directory",
    ),
    (
        "include-non-empty",
        {"code_source": {"root_path": ".", "include_paths": []}},
        "code_source.include_paths",
        "non-empty list",
    ),
    (
        "include-no-dotdot",
        {"code_source": {"root_path": ".", "include_paths": ["../secret"]}},
        "code_source.include_paths[0]",
        "without '..'",
    ),
    (
        "include-relative",
        {"code_source": {"root_path": ".", "include_paths": ["/etc"]}},
        "code_source.include_paths[0]",
        "relative to root_path",
    ),
    (
        "git-branch-xor-commit",
        {"code_source": {"root_path": ".", "git": {"branch": "main", "commit": "abc123"}}},
        "code_source.git",
        "exactly one of branch or commit",
    ),
    (
        "git-one-needed",
        {"code_source": {"root_path": ".", "git": {"remote": False}}},
        "code_source.git",
        "exactly one of branch or commit",
    ),
    (
        "git-remote-false-only",
        {"code_source": {"root_path": ".", "git": {"branch": "main", "remote": True}}},
        "code_source.git.remote",
        "only false",
    ),
    (
        "git-branch-characters",
        {"code_source": {"root_path": ".", "git": {"branch": "main; rm -rf"}}},
        "code_source.git.branch",
        "may only hold",
    ),
    (
        "git-commit-hex",
        {"code_source": {"root_path": ".", "git": {"commit": "HEAD~1"}}},
        "code_source.git.commit",
        "commit hash",
    ),
    (
        "volume-prefix",
        {"code_source": {"root_path": ".", "remote_volume": "/tmp/x"}},
        "code_source.remote_volume",
        "must start with /Volumes/",
    ),
    (
        "nested-type",
        {"code_source": {"type": "git", "snapshot": {"root_path": "."}}},
        "code_source.type",
        "must be snapshot",
    ),
    ("nested-snapshot-required", {"code_source": {"type": "snapshot"}}, "code_source.snapshot", "is required"),
    (
        "nested-and-flat-mixed",
        {"code_source": {"type": "snapshot", "snapshot": {"root_path": "."}, "root_path": "."}},
        "code_source.root_path",
        "mixes the flat form",
    ),
    (
        "nested-unknown-key",
        {"code_source": {"type": "snapshot", "snapshot": {"root": "."}}},
        "code_source.snapshot.root",
        "did you mean 'root_path'",
    ),
    ("retries-not-negative", {"max_retries": -1}, "max_retries", "at least 0"),
    ("timeout-at-least-1", {"timeout_minutes": 0}, "timeout_minutes", "at least 1"),
    ("timeout-an-integer", {"timeout_minutes": 1.5}, "timeout_minutes", "must be an integer"),
    ("token-length", {"idempotency_token": "t" * 65}, "idempotency_token", "at most 64"),
    ("token-blank", {"idempotency_token": "   "}, "idempotency_token", "must not be empty"),
    ("parameters-a-mapping", {"parameters": [1, 2]}, "parameters", "must be a mapping"),
    ("run-name-characters", {"mlflow_run_name": "my run"}, "mlflow_run_name", "only hold ASCII letters"),
    (
        "experiment-directory",
        {"mlflow_experiment_directory": "/Users/me"},
        "mlflow_experiment_directory",
        "must start with /Workspace",
    ),
    (
        "artifact-location",
        {"mlflow_artifact_location": "s3://bucket/x"},
        "mlflow_artifact_location",
        "dbfs:/ URI or a /Volumes/ path",
    ),
    ("permissions-a-list", {"permissions": {"user_name": "a"}}, "permissions", "must be a list"),
    (
        "permission-one-principal",
        {"permissions": [{"user_name": "a", "group_name": "b", "level": "CAN_VIEW"}]},
        "permissions[0]",
        "exactly one of user_name",
    ),
    (
        "permission-level",
        {"permissions": [{"user_name": "a", "level": "CAN_READ"}]},
        "permissions[0].level",
        "CAN_VIEW, CAN_MANAGE_RUN",
    ),
    ("permission-level-required", {"permissions": [{"user_name": "a"}]}, "permissions[0].level", "is required"),
    (
        "usage-policy-exclusive",
        {"usage_policy_name": "p", "usage_policy_id": "3f2c2a4e-1b9d-4f6a-9e1e-2b7c8d9e0f1a"},
        "usage_policy_id",
        "cannot be combined",
    ),
    ("usage-policy-uuid", {"usage_policy_id": "not-a-uuid"}, "usage_policy_id", "must be a UUID"),
    ("usage-policy-name-length", {"usage_policy_name": "p" * 128}, "usage_policy_name", "at most 127"),
    (
        "schedule-timezone",
        {"schedule": {"quartz_cron_expression": "0 0 * * * ?"}},
        "schedule.timezone_id",
        "is required",
    ),
    (
        "schedule-pause-status",
        {"schedule": {"quartz_cron_expression": "0 0 * * * ?", "timezone_id": "UTC", "pause_status": "STOPPED"}},
        "schedule.pause_status",
        "PAUSED or",
    ),
]


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "workload.yaml").write_text("placeholder: true\n")  # what root-a-directory points at
    return tmp_path


@pytest.mark.parametrize(
    ("changes", "path", "fragment"), [case[1:] for case in BROKEN_RULES], ids=[case[0] for case in BROKEN_RULES]
)
def test_each_rule_reports_its_path_and_what_to_do(
    folder: Path, changes: Dict[str, Any], path: str, fragment: str
) -> None:
    with pytest.raises(WorkloadFileError) as raised:
        schema.validate(_with(changes), str(folder))
    assert raised.value.path == path
    assert fragment in raised.value.problem
    assert str(raised.value).startswith(f"{path}: ")


def test_a_valid_file_with_every_field(folder: Path) -> None:
    (folder / "src").mkdir()
    document = yaml.safe_load("""
experiment_name: bert-ddp-2node
compute: {accelerator_type: GPU_8xH100, num_accelerators: 16, pool_id: pool-1, priority_class: NORMAL}
environment: {version: 5, dependencies: [transformers, datasets]}
code_source: {root_path: ., include_paths: [src], git: {branch: main, remote: false}, remote_volume: /Volumes/a/b/c}
command: |
  torchrun --nproc_per_node="$LOCAL_WORLD_SIZE" train.py
env_variables: {NCCL_SOCKET_IFNAME: eth0}
secrets: {HF_TOKEN: ml_team/hf_token}
parameters: {lr: 0.00003, epochs: 2, nested: {a: [1, 2]}}
max_retries: 0
timeout_minutes: 90
idempotency_token: abc
mlflow_run_name: first_try
mlflow_experiment_directory: /Workspace/Users/me/exps
mlflow_artifact_location: /Volumes/main/default/artifacts
permissions: [{user_name: a@b.c, level: CAN_VIEW}, {group_name: team, level: CAN_MANAGE_RUN}]
usage_policy_name: research
schedule: {quartz_cron_expression: "0 0 * * * ?", timezone_id: UTC}
""")
    workload, notes = schema.validate(document, str(folder))
    assert notes == []
    assert workload.compute.nodes == 2 and workload.compute.gpus_per_node == 8
    assert workload.environment.dependencies == ("transformers", "datasets")
    assert workload.environment.version == "5"
    assert workload.code_source.root_path == str(folder) and workload.code_source.include_paths == ("src",)
    assert workload.code_source.git.branch == "main"
    assert str(workload.secrets["HF_TOKEN"]) == "ml_team/hf_token"
    assert workload.mlflow_artifact_location == "dbfs:/Volumes/main/default/artifacts"
    assert workload.run_name == "first_try" and workload.max_retries == 0 and workload.timeout_minutes == 90


def test_defaults(folder: Path) -> None:
    workload, _ = schema.validate(_with({}), str(folder))
    assert workload.max_retries == 3 and workload.timeout_minutes is None and workload.run_name == "exp"
    assert workload.code_source is None and workload.environment.dependencies is None


def test_older_spellings_are_accepted_and_named(folder: Path) -> None:
    document = _with(
        {
            "code_source": {"type": "snapshot", "snapshot": {"root_path": "."}},
            "environment.docker_image": {"url": "registry/image:1"},
            "compute.provisioned_capacity_id": "pool-1",
        }
    )
    workload, notes = schema.validate(document, str(folder))
    assert workload.code_source.root_path == str(folder)
    assert workload.environment.image.url == "registry/image:1"
    assert workload.compute.pool_id == "pool-1"
    assert any("the current one is flat" in note for note in notes)
    assert any("current one is environment.unity_catalog_image" in note for note in notes)
    assert any("current one is compute.pool_id" in note for note in notes)


def test_root_path_expands_home_variables_and_project_root(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder / "code").mkdir()
    monkeypatch.setenv("HOME", str(folder))
    monkeypatch.setenv("CODE_FOLDER", "code")
    for root in ("~/code", "$CODE_FOLDER", "code", "project_root/code"):
        workload, _ = schema.validate(_with({"code_source": {"root_path": root}}), str(folder))
        assert workload.code_source.root_path == str(folder / "code"), root


def test_yaml_is_read_as_the_databricks_cli_reads_it(folder: Path) -> None:
    path = folder / "w.yaml"
    path.write_text(
        "experiment_name: exp\ncompute: {accelerator_type: CPU, num_accelerators: 1}\ncommand: 'true'\n"
        "env_variables: {DEBUG: yes, RATE: 1e-3, PADDED: 0.10, THREADS: 4, ON: on}\n"
    )
    workload, _ = loading.load(str(path))
    assert workload.env_variables == {"DEBUG": "yes", "RATE": "1e-3", "PADDED": "0.10", "THREADS": "4", "ON": "on"}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "is empty"),
        ("# only a comment\n", "is empty"),
        ("- a\n- b\n", "must be a mapping"),
        ("experiment_name: [unclosed\n", "is not valid YAML"),
    ],
)
def test_bad_files(folder: Path, text: str, problem: str) -> None:
    path = folder / "w.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadFileError, match=problem):
        loading.load(str(path))


def test_a_file_over_one_mebibyte_is_refused(folder: Path) -> None:
    path = folder / "w.yaml"
    path.write_text("experiment_name: exp\n" + "# padding\n" * 110_000)
    with pytest.raises(WorkloadFileError, match="at most 1 MiB"):
        loading.load(str(path))


# --- overrides -------------------------------------------------------------------------------------------------------


@pytest.fixture
def base_file(folder: Path) -> Path:
    path = folder / "w.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


def test_overrides_apply_in_order_as_yaml_values_and_create_parents(base_file: Path) -> None:
    workload, notes = loading.load(
        str(base_file),
        [
            "compute.num_accelerators=8",
            "compute.num_accelerators=4",
            "max_retries=0",
            "parameters.optimizer.betas=[0.9, 0.95]",
            "env_variables.FLAG=true",
            "secrets.TOKEN=team/token",
            "environment.dependencies=[numpy]",
        ],
    )
    assert workload.compute.num_accelerators == 4 and workload.max_retries == 0
    assert workload.parameters == {"optimizer": {"betas": [0.9, 0.95]}}
    assert workload.env_variables == {"FLAG": "true"} and str(workload.secrets["TOKEN"]) == "team/token"
    assert workload.environment.dependencies == ("numpy",)
    assert notes[:2] == ["override compute.num_accelerators: 2 -> 8", "override compute.num_accelerators: 8 -> 4"]
    assert "override parameters.optimizer.betas: (unset) -> [0.9, 0.95]" in notes


@pytest.mark.parametrize(
    ("override", "error", "fragment"),
    [
        ("compute.num_acelerators=4", WorkloadFileError, "did you mean 'num_accelerators'"),
        ("compute.accelerator_type.model=H100", WorkloadFileError, "is a string and has no sub-fields"),
        ("computer.num_accelerators=4", WorkloadFileError, "did you mean 'compute'"),
        ("num_accelerators", InvalidArguments, "takes KEY=VALUE"),
        ("=4", InvalidArguments, "takes KEY=VALUE"),
        ("workload.yaml", InvalidArguments, "the workload file goes with -f FILE"),
        ("compute..x=1", InvalidArguments, "has an empty part"),
        ("parameters=[unclosed", InvalidArguments, "the value is not YAML"),
        ("compute.num_accelerators=0", WorkloadFileError, "at least 1, not 0"),  # the whole file is validated again
        ("compute=CPU", WorkloadFileError, "compute: must be a mapping"),
    ],
)
def test_bad_overrides(base_file: Path, override: str, error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment.replace(".", r"\.").replace("[", r"\[").replace("(", r"\(")):
        loading.load(str(base_file), [override])


def test_override_below_a_value_that_is_no_mapping(base_file: Path) -> None:
    with pytest.raises(InvalidArguments, match="parameters holds a value, not a mapping"):
        loading.load(str(base_file), ["parameters=3", "parameters.a=1"])


def test_schema_help_lists_fields_and_their_rules() -> None:
    text = schema.help_text(["compute"])
    assert "accelerator_type (string) [required]" in text and "num_accelerators (integer) [required]" in text
    assert "older spellings, still accepted: provisioned_capacity_id" in text
    with pytest.raises(WorkloadFileError, match="did you mean 'compute'"):
        schema.help_text(["compte"])


# --- the command line ------------------------------------------------------------------------------------------------


def test_dry_run_validates_and_starts_nothing(base_file: Path) -> None:
    done = air("run", "-f", str(base_file), "--dry-run", "-o", "json", "--override", "max_retries=1")
    assert done.returncode == 0, done.stderr
    data = envelope(done)
    assert data["v"] == 1 and data["data"] == {"status": "DRY_RUN_OK", "dry_run": True}
    assert "override max_retries: (unset) -> 1" in done.stderr
    assert not (Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs").exists()


@pytest.mark.slow
def test_a_bad_file_exits_2_with_the_error_as_json_or_text(base_file: Path) -> None:
    done = air("-o", "json", "run", "-f", str(base_file), "--override", "compute.num_accelerators=0")
    assert done.returncode == 2
    error = envelope(done)["error"]
    assert error["code"] == "INVALID_ARGS" and error["kind"] == "PERMANENT"
    assert error["message"] == "compute.num_accelerators: must be at least 1, not 0"
    text = air("run", "-f", str(base_file.with_name("missing.yaml")))
    assert text.returncode == 2 and "missing.yaml: no such file" in text.stderr


def test_bad_arguments_exit_2(base_file: Path) -> None:
    assert air("run").returncode == 2  # -f is required
    assert air("get", "0").returncode == 2  # a run id is a positive integer
    done = air("get", "abc", "-o", "json")
    assert done.returncode == 2 and envelope(done)["error"]["code"] == "INVALID_ARGS"
    assert air("list", "--filter", "color=red").returncode == 2


def test_config_help_from_the_command_line() -> None:
    done = air("run", "-h", "config.code_source.git")
    assert done.returncode == 0
    assert "branch (string)" in done.stdout and "remote (boolean) [default false]" in done.stdout
