"""Exit codes and streams in every mode: each kind of input run through each mode, stdout and stderr exact.

Kinds of input: nothing relevant, something to change, an item that needs a person (nothing rewritten), a blocking
item (file left as it is), a file that cannot be processed. Modes: write, write with --exit-nonzero-on-change,
--diff, --diff=json, --check, --out-dir, and standard input in write, --diff and --check modes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Optional, Tuple

import pytest
from cli_fixtures import (
    BLOCKED,
    CLEAN,
    MANUAL,
    NOT_UTF8,
    NOT_UTF8_ADVICE,
    SCRIPT,
    SCRIPT_AFTER,
    engine_lines,
    feed_stdin,
)

from air_migrate.cli import main
from air_migrate.diffing import file_diff

INPUTS: Dict[str, bytes] = {
    "clean": CLEAN.encode(),
    "change": SCRIPT.encode(),
    "manual": MANUAL.encode(),
    "blocking": BLOCKED.encode(),
    "failed": NOT_UTF8,
}
AFTER = {"change": SCRIPT_AFTER.encode()}
NEEDS_PERSON = {"manual", "blocking"}

EXIT_CODES: Dict[str, Tuple[int, int, int, int, int]] = {
    # mode: clean, change, manual, blocking, failed
    "write": (0, 0, 0, 0, 3),
    "write-exit-nonzero": (0, 1, 1, 1, 3),
    "diff": (0, 1, 1, 1, 3),
    "diff-json": (0, 1, 1, 1, 3),
    "check": (0, 1, 1, 1, 3),
    "out-dir": (0, 0, 0, 0, 3),
    "stdin": (0, 0, 0, 0, 3),
    "stdin-diff": (0, 1, 1, 1, 3),
    "stdin-check": (0, 1, 1, 1, 3),
}
FLAGS = {
    "write": [],
    "write-exit-nonzero": ["--exit-nonzero-on-change"],
    "diff": ["--diff"],
    "diff-json": ["--diff=json"],
    "check": ["--check"],
    "out-dir": ["--out-dir", "out"],
    "stdin": [],
    "stdin-diff": ["--diff"],
    "stdin-check": ["--check"],
}


def _summary(kind: str, verb: str, data: bytes) -> str:
    lines = engine_lines("job.py", data)
    changed = kind == "change"
    changes = sum(" change " in line or " review " in line for line in lines) if changed else 0
    person = sum(" manual " in line or " blocking " in line for line in lines)
    text = (
        f"air-migrate: 1 file(s) scanned, {0 if kind == 'clean' else 1} mention serverless_gpu, its keywords or TorchDistributor, "
        f"{int(changed)} {verb} ({changes} change(s)), {person} item(s) need a person, {int(kind == 'failed')} failed"
    )
    if kind == "blocking":
        text += "; 1 file(s) not converted because of blocking items (see --partial)"
    if kind == "clean":
        text += "; nothing to migrate was found"
    return text + "\n"


def _expected(mode: str, kind: str) -> Tuple[int, str, str, Optional[bytes]]:
    """(exit code, stdout, stderr, bytes of job.py afterwards: in place, in out/, or None for standard input)."""
    data = INPUTS[kind]
    after = AFTER.get(kind, data)
    stdin = mode.startswith("stdin")
    report = "".join(line + "\n" for line in engine_lines("job.py", data))
    error = (
        f"job.py: error: not UTF-8 (invalid continuation byte at byte 20); {NOT_UTF8_ADVICE}\n"
        if kind == "failed"
        else ""
    )
    dry = mode in ("diff", "diff-json", "check", "stdin-diff", "stdin-check")
    verb = "would change" if dry else ("changed in out" if mode == "out-dir" else "changed")
    summary = _summary(kind, verb, data)
    diff = file_diff(data, after, "job.py") if kind == "change" else ""
    would = "job.py: would change\n" if kind == "change" else ""
    code = EXIT_CODES[mode][list(INPUTS).index(kind)]
    if mode in ("write", "write-exit-nonzero"):
        return code, report, error + summary, after
    if mode == "out-dir":
        return code, report, error + summary, after
    if mode in ("diff", "diff-json"):
        return code, diff, report + error + summary, data
    if mode == "check":
        return code, report + would, error + summary, data
    assert stdin
    if mode == "stdin":
        return code, after.decode("utf-8", "surrogateescape"), report + error + summary, None
    if mode == "stdin-diff":
        return code, diff, report + error + summary, None
    return code, "", report + would + error + summary, None


@pytest.mark.parametrize("kind", list(INPUTS))
@pytest.mark.parametrize("mode", list(EXIT_CODES))
def test_every_mode_gives_its_exit_code_and_streams(
    mode: str, kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    monkeypatch.chdir(tmp_path)
    data = INPUTS[kind]
    argv: List[str] = list(FLAGS[mode])
    if mode.startswith("stdin"):
        feed_stdin(monkeypatch, data)
        argv += ["--stdin-filename", "job.py", "-"]
    else:
        (tmp_path / "job.py").write_bytes(data)
        argv.append("job.py")
    code, stdout, stderr, file_after = _expected(mode, kind)
    assert main(argv) == code
    out, err = capsysbinary.readouterr()
    assert out.decode("utf-8", "surrogateescape") == stdout
    assert err.decode() == stderr
    if mode == "out-dir":
        assert (tmp_path / "out" / "job.py").read_bytes() == file_after
        assert (tmp_path / "job.py").read_bytes() == data  # the input is never touched
    elif file_after is not None:
        assert (tmp_path / "job.py").read_bytes() == file_after


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--diff", "--check", "job.py"], "not allowed with argument"),
        (["--diff", "--out-dir", "out", "job.py"], "not allowed with argument"),
        (["--check", "--out-dir", "out", "job.py"], "not allowed with argument"),
        (["--force", "job.py"], "--force only applies with --out-dir"),
        (["--out-dir", "out", "-"], "--out-dir writes copies of files"),
        (["-", "job.py"], "cannot be combined with other paths"),
        (["--stdin-filename", "x.py", "job.py"], '--stdin-filename only applies when the path is "-"'),
        (["--pip-package", "x", "job.py"], "--pip-package only applies with --fix-pip"),
        (["--fix-pip", "--pip-package", "x; rm -rf /", "job.py"], "is not one package requirement"),
        (["-j", "-1", "job.py"], "give 1 or more, or 0 for one per CPU"),
        (["-j", "two", "job.py"], "is not a number of processes"),
        (["--diff=html", "job.py"], "invalid choice: 'html'"),
        (["--color", "sometimes", "job.py"], "invalid choice: 'sometimes'"),
        (["--report-format", "xml", "job.py"], "invalid choice: 'xml'"),
        (["--report-format", "json", "job.py"], "--report-format only applies with --report FILE"),
        (["--report", "no/such/dir/r.json", "job.py"], "does not exist"),
        (["--select", "AM999", "job.py"], "unknown rule code(s): AM999"),
        (["--ignore", "am1O1", "job.py"], "unknown rule code(s): AM1O1"),
        (["--dif", "job.py"], "unrecognized arguments: --dif"),
        ([], "give at least one file or directory"),
    ],
)
def test_bad_command_lines_exit_2_and_say_what_is_wrong(
    argv: List[str],
    message: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "job.py").write_text(SCRIPT)
    with pytest.raises(SystemExit) as usage:
        main(argv)
    assert usage.value.code == 2
    out, err = capsys.readouterr()
    assert out == "" and message in err
    assert (tmp_path / "job.py").read_text() == SCRIPT and not (tmp_path / "out").exists()


def test_a_failed_file_does_not_stop_the_others_and_wins_the_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "a_bad.py").write_bytes(NOT_UTF8)
    (tmp_path / "b_good.py").write_text(SCRIPT)
    (tmp_path / "c_blocked.py").write_text(BLOCKED)
    assert main(["--check", str(tmp_path)]) == 3
    assert main([str(tmp_path)]) == 3
    assert (tmp_path / "b_good.py").read_text() == SCRIPT_AFTER
    assert (tmp_path / "c_blocked.py").read_text() == BLOCKED
    err = capsys.readouterr().err
    assert f"{tmp_path}/a_bad.py: error: not UTF-8" in err
    assert "3 file(s) scanned, 3 mention serverless_gpu, its keywords or TorchDistributor, 1 changed" in err
    assert err.rstrip().endswith("1 failed; 1 file(s) not converted because of blocking items (see --partial)")
