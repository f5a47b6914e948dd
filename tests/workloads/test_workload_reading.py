"""Reading a workload file: what the YAML reader refuses (anchors, repeated keys, deep nesting, huge integers, tags),
the bounds of the schema's numbers and strings, and where ``root_path`` and ``include_paths`` may point.

The same cases as whole files, through the real ``air run -f``, are in ``test_workload_hostile.py``.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path
from typing import Any, Dict

import pytest
import yaml

from databricks.air.workloads import loading, schema, yaml_values
from databricks.air.workloads.errors import InvalidArguments, WorkloadFileError

from workload_support import air, envelope, submit, wait_for_end, write_workload

BASE: Dict[str, Any] = {
    "experiment_name": "exp",
    "compute": {"accelerator_type": "CPU", "num_accelerators": 2},
    "command": "true",
}

# --- the YAML reader -------------------------------------------------------------------------------------------------

# (case id, text, the field named, a fragment of the reason)
REFUSED = [
    ("anchor", "a: &x 1\nb: 2\n", "a", "has the YAML anchor &x (line 1)"),
    ("alias", "a: [1, *x]\n", "a[1]", "uses the YAML alias *x (line 1)"),
    ("self-reference", "a: &x [*x]\n", "a", "anchors and aliases are not supported"),
    ("merge-of-an-alias", "base: &b {x: 1}\nc: {<<: *b}\n", "base", "has the YAML anchor &b"),
    ("anchor-on-the-document", "&top {a: 1}\n", "", "has the YAML anchor &top"),
    ("repeated-key", "a: 1\nb: 2\na: 3\n", "a", "is given twice (lines 1 and 3)"),
    ("repeated-key-one-line", "p: {lr: 1, lr: 2}\n", "p.lr", "is given twice (line 1)"),
    ("repeated-key-in-a-list", "p:\n  - {a: 1}\n  - b: 1\n    b: 2\n", "p[1].b", "is given twice (lines 3 and 4)"),
    ("repeated-key-spelled-otherwise", "yes: 1\n'yes': 2\n", "yes", "is given twice"),
    ("too-deep-lists", "p: " + "[" * 64 + "]" * 64 + "\n", "p", "nested more than 64 levels"),
    ("too-deep-mappings", "p: " + "{a: " * 64 + "1" + "}" * 64 + "\n", "p", "nested more than 64 levels"),
    ("too-deep-900", "p: " + "[" * 900 + "]" * 900 + "\n", "p", "nested more than 64 levels"),
    ("integer-101-digits", "seed: " + "9" * 101 + "\n", "seed", "is an integer of 101 digits"),
    ("integer-5000-digits", "seed: -" + "9" * 5000 + "\n", "seed", "is an integer of 5000 digits"),
    ("hex-integer-5000-digits", "seed: 0x" + "f" * 5000 + "\n", "seed", "is an integer of 5000 digits"),
    ("tag-set", "s: !!set {a: null}\n", "s", "has the YAML tag !!set"),
    ("tag-timestamp", "t: !!timestamp 2020-01-01\n", "t", "has the YAML tag !!timestamp"),
    ("tag-binary", "b: !!binary aGk=\n", "b", "has the YAML tag !!binary"),
    ("tag-python", "x: !!python/name:os.system\n", "x", "has the YAML tag !!python/name:os.system"),
    ("key-with-a-newline", '"a\\nb": 1\n"a\\nb": 2\n', "'a\\nb'", "is given twice"),
]


@pytest.mark.parametrize(("text", "field", "fragment"), [case[1:] for case in REFUSED], ids=[c[0] for c in REFUSED])
def test_the_reader_refuses_naming_the_field(text: str, field: str, fragment: str) -> None:
    with pytest.raises(yaml_values.Refused) as raised:
        yaml_values.load(text)
    assert raised.value.field == field
    assert fragment in raised.value.reason
    assert "\n" not in raised.value.reason


@pytest.mark.parametrize(
    "text",
    [
        "p: " + "[" * 63 + "]" * 63 + "\n",  # 64 levels, the file's mapping being the first
        "p: " + "{a: " * 63 + "1" + "}" * 63 + "\n",
        "seed: " + "9" * 100 + "\n",
        "a: !!str 1\nb: !!int '2'\nc: !!float '1.5'\nd: !!bool 'true'\ne: !!null ''\nf: !!seq [1]\ng: !!map {x: 1}\n",
        "a: ! 1\n",  # the non-specific tag: a string
        "c: {<<: {x: 1}, y: 2}\n",  # a merge key without an alias
        "1: a\n'1': b\n",  # an integer key and a string key
    ],
)
def test_the_reader_takes_what_is_not_refused(text: str) -> None:
    assert isinstance(yaml_values.load(text), dict)


@pytest.mark.parametrize("text", ["a: !!int abc\n", "a: !!float abc\n", "a: !!bool maybe\n"])
def test_a_wrong_explicit_tag_is_a_yaml_error_not_a_crash(text: str) -> None:
    with pytest.raises(yaml.YAMLError):
        yaml_values.load(text)


def test_what_is_written_back_has_no_anchor_and_reads_back() -> None:
    shared = [1, 2]
    text = yaml_values.dump({"a": shared, "b": shared, "c": {"d": shared}})
    assert "&" not in text and "*" not in text
    assert yaml_values.load(text) == {"a": [1, 2], "b": [1, 2], "c": {"d": [1, 2]}}


def test_a_file_names_the_field_and_an_override_its_text(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("experiment_name: exp\nparameters: {lr: 1, lr: 2}\n")
    with pytest.raises(WorkloadFileError) as raised:
        loading.load(str(path))
    assert str(raised.value) == (
        "parameters.lr: is given twice (line 2): keep one of them (YAML would silently keep the last)"
    )
    path.write_text(yaml.safe_dump(BASE))
    with pytest.raises(InvalidArguments, match=r"^--override 'parameters=\{a: 1, a: 2\}': a is given twice"):
        loading.load(str(path), ["parameters={a: 1, a: 2}"])


def test_a_nul_byte_in_the_file_is_named_by_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_bytes(b"experiment_name: exp\ncommand: a\0b\n")
    with pytest.raises(WorkloadFileError) as raised:
        loading.load(str(path))
    assert str(raised.value) == (
        f"{path}: is not valid YAML: the character #x0000 is not allowed in YAML at line 2, column 11"
    )


def test_a_file_is_read_up_to_its_cap_only(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(yaml.safe_dump(BASE) + "#" * (loading.MAX_FILE_BYTES - len(yaml.safe_dump(BASE))))
    assert os.path.getsize(path) == loading.MAX_FILE_BYTES
    loading.load(str(path))  # exactly 1 MiB is fine
    with path.open("a") as stream:
        stream.write("#")
    with pytest.raises(WorkloadFileError, match="is more than 1 MiB"):
        loading.load(str(path))


# --- the schema's bounds ---------------------------------------------------------------------------------------------


def _with(changes: Dict[str, Any]) -> Dict[str, Any]:
    document = copy.deepcopy(BASE)
    for dotted, value in changes.items():
        node = document
        *parents, leaf = dotted.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
    return document


# (case id, changes to BASE, the error's path, a fragment of its message)
OUT_OF_BOUNDS = [
    ("retries-101", {"max_retries": 101}, "max_retries", "must be at most 100, not 101"),
    ("timeout-30-days-and-a-minute", {"timeout_minutes": 43201}, "timeout_minutes", "at most 43200"),
    ("cpu-ranks-1025", {"compute.num_accelerators": 1025}, "compute.num_accelerators", "at most 1024, not 1025"),
    (
        "gpus-129-nodes",
        {"compute.accelerator_type": "GPU_8xH100", "compute.num_accelerators": 1032},
        "compute.num_accelerators",
        "at most 1024, not 1032 (128 nodes of 8 GPUs",
    ),
    (
        "one-gpu-nodes-129",
        {"compute.accelerator_type": "GPU_1xH100", "compute.num_accelerators": 129},
        "compute.num_accelerators",
        "at most 128, not 129 (128 nodes of 1 GPUs",
    ),
    (
        "variable-too-long",
        {"env_variables": {"BIG": "x" * (128 * 1024)}},
        "env_variables.BIG",
        "an environment variable may hold at most 131071",
    ),
    ("nul-in-a-variable", {"env_variables": {"A": "x\0"}}, "env_variables.A", "holds a NUL character"),
    ("nul-in-the-command", {"command": "echo \0"}, "command", "holds a NUL character (\\0) at character 6"),
    ("nul-in-root-path", {"code_source": {"root_path": ".\0"}}, "code_source.root_path", "holds a NUL character"),
    (
        "nul-in-an-include-path",
        {"code_source": {"root_path": ".", "include_paths": ["a\0"]}},
        "code_source.include_paths[0]",
        "holds a NUL character",
    ),
    ("nul-in-a-secret", {"secrets": {"T": "s/k\0"}}, "secrets.T", "holds a NUL character"),
    ("newline-after-the-name", {"experiment_name": "exp\n"}, "experiment_name", "may only hold ASCII letters"),
    (
        "newline-after-a-variable-name",
        {"env_variables": {"A\n": "1"}},
        "env_variables.'A\\n'",
        "not a valid environment variable name",
    ),
    (
        "newline-after-a-branch",
        {"code_source": {"root_path": ".", "git": {"branch": "main\n"}}},
        "code_source.git.branch",
        "may only hold",
    ),
    (
        "newline-after-a-commit",
        {"code_source": {"root_path": ".", "git": {"commit": "abc123\n"}}},
        "code_source.git.commit",
        "commit hash",
    ),
    ("unknown-key-with-a-newline", {"comm\nand": "x"}, "'comm\\nand'", "unknown field"),
]


@pytest.mark.parametrize(
    ("changes", "path", "fragment"), [c[1:] for c in OUT_OF_BOUNDS], ids=[c[0] for c in OUT_OF_BOUNDS]
)
def test_each_bound_reports_its_path(tmp_path: Path, changes: Dict[str, Any], path: str, fragment: str) -> None:
    with pytest.raises(WorkloadFileError) as raised:
        schema.validate(_with(changes), str(tmp_path))
    assert raised.value.path == path
    assert fragment in raised.value.problem
    assert "\n" not in str(raised.value) and "\0" not in str(raised.value)


def test_the_bounds_themselves_are_allowed(tmp_path: Path) -> None:
    workload, _ = schema.validate(
        _with(
            {
                "max_retries": 100,
                "timeout_minutes": 43200,
                "compute.accelerator_type": "GPU_8xH100",
                "compute.num_accelerators": 1024,
                "env_variables": {"BIG": "x" * (128 * 1024 - 5)},
            }
        ),
        str(tmp_path),
    )
    assert workload.max_retries == 100 and workload.compute.nodes == 128
    workload, _ = schema.validate(_with({"compute.num_accelerators": 1024}), str(tmp_path))
    assert workload.compute.num_accelerators == 1024


# --- root_path and include_paths -------------------------------------------------------------------------------------


def test_root_path_may_not_be_the_home_folder_or_above_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "users" / "me"
    (home / "project").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    for root, what in (("~", "is your home folder"), (str(tmp_path / "users"), "a folder that holds your home")):
        with pytest.raises(WorkloadFileError, match=what) as raised:
            schema.validate(_with({"code_source": {"root_path": root}}), str(tmp_path))
        assert raised.value.path == "code_source.root_path"
    workload, _ = schema.validate(_with({"code_source": {"root_path": "~/project"}}), str(tmp_path))
    assert workload.code_source.root_path == str(home / "project")


def test_include_paths_are_followed_to_the_end_and_must_stay_under_root_path(tmp_path: Path) -> None:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "a.py").write_text("x")
    (root / "alias").symlink_to("src")
    (root / "out").symlink_to(tmp_path)
    (tmp_path / "secret.txt").write_text("s")
    ok, _ = schema.validate(
        _with({"code_source": {"root_path": "proj", "include_paths": ["alias/a.py", "alias"]}}), str(tmp_path)
    )
    assert ok.code_source.include_paths == ("alias/a.py", "alias")
    for entry, where in (("out/secret.txt", tmp_path / "secret.txt"), ("out", tmp_path)):
        with pytest.raises(WorkloadFileError) as raised:
            schema.validate(_with({"code_source": {"root_path": "proj", "include_paths": [entry]}}), str(tmp_path))
        assert raised.value.path == "code_source.include_paths[0]"
        assert f"{entry!r} leads out of root_path, through a symbolic link, to {where}" in raised.value.problem
    with pytest.raises(WorkloadFileError, match="'nope.py' does not exist under root_path"):
        schema.validate(_with({"code_source": {"root_path": "proj", "include_paths": ["nope.py"]}}), str(tmp_path))


# --- what air get shows of a configuration recorded before these rules ----------------------------------------------


def test_get_json_survives_a_recorded_configuration_with_anchors(tmp_path: Path) -> None:
    run_id = submit(write_workload(tmp_path, command="true"))
    wait_for_end(run_id)
    recorded = Path(os.environ["DATABRICKS_AIR_HOME"]) / "runs" / str(run_id) / "workload.yaml"
    recorded.write_text("experiment_name: test-workload\nparameters: {a: &a [1], b: *a}\n")
    done = air("get", str(run_id), "-o", "json")
    assert done.returncode == 0, done.stderr
    assert envelope(done)["data"]["configuration"] is None
    assert "recorded configuration cannot be read back" in done.stderr
    assert "&a [1]" in air("get", str(run_id)).stdout
