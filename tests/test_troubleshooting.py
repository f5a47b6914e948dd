"""The messages that ``docs/troubleshooting.md`` quotes are the ones the library raises.

The page lists errors for lookup, one ```` ```text ```` block per section and no code that raises them, so the docs
run cannot compare them with an output. Here each message that a CPU machine can produce in a moment is produced,
and must be a line of its section's block (``tests/docs_output.py`` masks paths, ports and times on both sides, and
a ``...`` in the page's line matches any text). Those blocks say so in their ``<!-- not-checked: ... -->`` marker;
the others say what producing them would need.
"""

from __future__ import annotations

import re
import socket
import warnings
from pathlib import Path
from typing import Callable, Iterator, List

import pytest

from docs_blocks import read_page
from docs_output import line_matches, masked

PAGE = Path(__file__).resolve().parent.parent / "docs" / "troubleshooting.md"
CHECKED_HERE = "checked against what the library raises by tests/test_troubleshooting.py"


def _section_lines(heading: str) -> List[str]:
    """The masked lines of the first ```text block after the ``### heading`` of the page."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index(f"\n### {heading}\n")
    heading_line = text.count("\n", 0, start) + 2
    block = next(b for b in read_page(PAGE).blocks if b.language == "text" and b.line > heading_line)
    reason = block.not_checked_reason or ""
    assert reason.startswith(CHECKED_HERE), f"the block under {heading!r} should say that this test checks it"
    return masked(block.code)


def _message(action: Callable[[], object]) -> Iterator[str]:
    """``Type: message`` of what ``action`` raises, and of each warning it issues."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            action()
        except Exception as error:  # noqa: BLE001 - the message is what is checked
            yield f"{type(error).__name__}: {error}"
        else:
            assert caught, "neither raised nor warned"
    for warning in caught:
        if issubclass(warning.category, (FutureWarning, UserWarning)):
            yield f"{warning.category.__name__}: {warning.message}"


def train(epochs: int) -> int:
    return epochs


def batches(count: int):
    yield from range(count)


async def fetch(url: str) -> str:
    return url


def _decorate(function: object) -> object:
    from databricks.air import distributed

    return distributed(accelerator_type="CPU", num_accelerators=2)(function)


def _decorated():
    from databricks.air import distributed

    return distributed(accelerator_type="CPU", num_accelerators=2)(train)


def _decorate_twice() -> object:
    from databricks.air import distributed

    return distributed(accelerator_type="CPU", num_accelerators=2)(_decorated())


def _distributed(**settings):
    from databricks.air import distributed

    return lambda: distributed(**settings)(train)


def _call_with(monkeypatch: pytest.MonkeyPatch, name: str, value: str) -> Callable[[], object]:
    """A call of a decorated function with the variable ``name`` set: it fails before any rank starts."""
    function = _decorated()

    def call() -> object:
        monkeypatch.setenv(name, value)
        return function.distributed(1)

    return call


def _with_rank(monkeypatch: pytest.MonkeyPatch, value: str) -> Callable[[], object]:
    from databricks.air import runtime

    monkeypatch.setenv("RANK", value)
    return runtime.get_global_rank


def _busy_port(monkeypatch: pytest.MonkeyPatch, listener: socket.socket) -> Callable[[], object]:
    return _call_with(monkeypatch, "MASTER_PORT", str(listener.getsockname()[1]))


CASES = {
    "num_accelerators 2.0": (
        "The number of accelerators is not a positive int",
        lambda mp, _: _distributed(accelerator_type="CPU", num_accelerators=2.0),
    ),
    "num_accelerators 0": (
        "The number of accelerators is not a positive int",
        lambda mp, _: _distributed(accelerator_type="CPU", num_accelerators=0),
    ),
    "TPU": ("Unknown accelerator type", lambda mp, _: _distributed(accelerator_type="TPU", num_accelerators=2)),
    "timeout 0": ("Invalid timeout", lambda mp, _: _distributed(accelerator_type="CPU", num_accelerators=2, timeout=0)),
    "timeout '1h'": (
        "Invalid timeout",
        lambda mp, _: _distributed(accelerator_type="CPU", num_accelerators=2, timeout="1h"),
    ),
    "timeout nan": (
        "Invalid timeout",
        lambda mp, _: _distributed(accelerator_type="CPU", num_accelerators=2, timeout=float("nan")),
    ),
    "1000 CPU ranks": (
        "More CPU ranks than this machine can run",
        lambda mp, _: _distributed(accelerator_type="CPU", num_accelerators=1000),
    ),
    "generator": ("The function is a generator or a coroutine", lambda mp, _: lambda: _decorate(batches)),
    "coroutine": ("The function is a generator or a coroutine", lambda mp, _: lambda: _decorate(fetch)),
    "gpus and num_accelerators": ("Old and new names together", lambda mp, _: _distributed(num_accelerators=2, gpus=2)),
    "gpus": ("Deprecation warnings about `gpus`, `gpu_type` or a GPU type", lambda mp, _: _distributed(gpus=2)),
    "gpu_type H100": (
        "Deprecation warnings about `gpus`, `gpu_type` or a GPU type",
        lambda mp, _: _distributed(gpus=8, gpu_type="H100"),
    ),
    "decorated twice": ("The function is already decorated", lambda mp, _: _decorate_twice),
    "called directly": ("Calling the decorated function directly", lambda mp, _: lambda: _decorated()(3)),
    "missing argument": ("The arguments do not fit the function", lambda mp, _: lambda: _decorated().distributed()),
    "too many arguments": (
        "The arguments do not fit the function",
        lambda mp, _: lambda: _decorated().distributed(1, 2),
    ),
    "MASTER_PORT busy": ("`MASTER_PORT` is busy or malformed", _busy_port),
    "MASTER_PORT http": ("`MASTER_PORT` is busy or malformed", lambda mp, _: _call_with(mp, "MASTER_PORT", "http")),
    "start method": (
        "A configuration variable has a wrong value",
        lambda mp, _: _call_with(mp, "DATABRICKS_AIR_START_METHOD", "forkserver"),
    ),
    "grace": (
        "A configuration variable has a wrong value",
        lambda mp, _: _call_with(mp, "DATABRICKS_AIR_TERMINATE_GRACE_SECONDS", "soon"),
    ),
    "keep calls": (
        "A configuration variable has a wrong value",
        lambda mp, _: _call_with(mp, "DATABRICKS_AIR_LOG_KEEP_CALLS", "abc"),
    ),
    "a switch": (
        "A configuration variable has a wrong value",
        lambda mp, _: _call_with(mp, "DATABRICKS_AIR_MLFLOW", "flase"),
    ),
    "log dir": (
        "A configuration variable has a wrong value",
        lambda mp, _: _call_with(mp, "DATABRICKS_AIR_LOG_DIR", "/etc/passwd"),
    ),
    "torch's barrier": ("The default process group is not initialised", lambda mp, _: _barrier(mp, "torch")),
    "the helpers' barrier": ("The default process group is not initialised", lambda mp, _: _barrier(mp, "utils")),
    "RANK one": (
        "A torchrun variable is not an integer, or disagrees with the process group",
        lambda mp, _: _with_rank(mp, "one"),
    ),
    "device tpu": ("`initialize_dist()` refuses a device", lambda mp, _: _initialize_dist("tpu")),
    "device cuda:0": ("`initialize_dist()` refuses a device", lambda mp, _: _initialize_dist("cuda:0")),
    "remote without count": (
        "The cluster cannot hold the ranks",
        lambda mp, _: _distributed(remote=True, accelerator_type="CPU"),
    ),
}


def _barrier(monkeypatch: pytest.MonkeyPatch, whose: str) -> Callable[[], object]:
    """A barrier outside any process group, in a process that says it is one of 2 ranks."""
    import torch.distributed

    from databricks.air import utils

    if torch.distributed.is_initialized():
        pytest.skip("an earlier test of this process left a process group")
    monkeypatch.setenv("WORLD_SIZE", "2")
    return torch.distributed.barrier if whose == "torch" else utils.barrier


def _initialize_dist(device: str) -> Callable[[], object]:
    from databricks.air.utils import initialize_dist

    return lambda: initialize_dist(device)


@pytest.fixture
def environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> pytest.MonkeyPatch:
    """CPU ranks, no tracking, logs in the test's folder, and none of the variables the messages are about."""
    for name in (
        "MASTER_PORT",
        "MASTER_ADDR",
        "RANK",
        "WORLD_SIZE",
        "DATABRICKS_AIR_START_METHOD",
        "DATABRICKS_AIR_TERMINATE_GRACE_SECONDS",
    ):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABRICKS_AIR_ACCELERATOR_TYPE", "CPU")
    monkeypatch.setenv("DATABRICKS_AIR_MLFLOW", "0")
    monkeypatch.setenv("DATABRICKS_AIR_LOG_DIR", str(tmp_path / "logs"))
    return monkeypatch


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A port that is taken."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken


@pytest.mark.parametrize("case", CASES, ids=str)
def test_the_page_quotes_the_message(case: str, environment: pytest.MonkeyPatch, listener: socket.socket) -> None:
    heading, make = CASES[case]
    if case == "device cuda:0":
        import torch

        if torch.cuda.is_available():
            pytest.skip("the message is about a machine without CUDA")
    produced = list(_message(make(environment, listener)))
    if case == "gpu_type H100":  # gpus=8 also warns about gpus, with another count than the page's
        produced = [message for message in produced if "gpu_type" in message]
    shown = _section_lines(heading)
    assert produced
    for message in produced:
        # The page's taken port is 29500, this test's whichever was free.
        message = re.sub(rf"\b{listener.getsockname()[1]}\b", "29500", message)
        (line,) = masked(message)
        assert any(line_matches(expected, line) for expected in shown), (
            f"docs/troubleshooting.md, under {heading!r}, does not show what the library says:\n  {line}\n"
            "the page shows:\n" + "\n".join(f"  {expected}" for expected in shown)
        )
