"""What `.distributed(...)` gives a working function: the rank environment, the caller's context, results."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from databricks.air import distributed

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=120)


def rank_environment() -> dict:
    keys = [
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "LOCAL_WORLD_SIZE",
        "NODE_RANK",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "PYTHONUNBUFFERED",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING",
        "REPLICA_RANK",
        "OMP_NUM_THREADS",
        "CUDA_VISIBLE_DEVICES",
        "AIR_TEST_VALUE",
    ]
    import torch

    return {**{k: os.environ.get(k) for k in keys}, "threads": torch.get_num_threads(), "pid": os.getpid()}


def all_reduce_sum(value: float) -> float:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    tensor = torch.tensor([value + int(os.environ["RANK"])])
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    return float(tensor.item())


def test_every_rank_gets_the_torchrun_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    envs = cpu2(rank_environment).distributed()
    cores = len(os.sched_getaffinity(0))
    for rank, env in enumerate(envs):
        assert env["RANK"] == env["LOCAL_RANK"] == str(rank)
        assert (env["WORLD_SIZE"], env["LOCAL_WORLD_SIZE"]) == ("2", "2")
        assert (env["NODE_RANK"], env["GROUP_RANK"], env["REPLICA_RANK"]) == ("0", "0", "0")
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert 0 < int(env["MASTER_PORT"]) < 65536
        assert (env["PYTHONUNBUFFERED"], env["TORCH_NCCL_ASYNC_ERROR_HANDLING"]) == ("1", "1")
        assert env["OMP_NUM_THREADS"] == str(max(1, cores // 2))
        assert env["threads"] == max(1, cores // 2)
        assert env["CUDA_VISIBLE_DEVICES"] == ""  # left alone
    assert envs[0]["MASTER_PORT"] == envs[1]["MASTER_PORT"]
    assert envs[0]["pid"] != envs[1]["pid"] != os.getpid()


@pytest.mark.slow
def test_the_callers_own_settings_win(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    with socket.socket() as probe:
        probe.bind(("", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv("MASTER_ADDR", "localhost")
    monkeypatch.setenv("MASTER_PORT", str(port))
    envs = cpu2(rank_environment).distributed()
    assert {(e["OMP_NUM_THREADS"], e["MASTER_ADDR"], e["MASTER_PORT"]) for e in envs} == {("1", "localhost", str(port))}
    assert cpu2(all_reduce_sum).distributed(1.0) == [3.0, 3.0]


def test_results_come_back_in_rank_order_for_any_world_size() -> None:
    assert distributed(num_accelerators=3, accelerator_type="CPU")(all_reduce_sum).distributed(10.0) == [33.0] * 3

    def identity(tag: str) -> tuple:
        return tag, int(os.environ["RANK"])

    assert distributed(num_accelerators=4, accelerator_type="CPU")(identity).distributed("x") == [
        ("x", 0),
        ("x", 1),
        ("x", 2),
        ("x", 3),
    ]


def test_arguments_are_bound_with_defaults(tmp_path: Path) -> None:
    def configured(a: int, b: int = 2, *rest: int, scale: float = 1.0, **extra: str) -> tuple:
        return a, b, rest, scale, extra

    fn = cpu2(configured)
    assert fn.distributed(1) == [(1, 2, (), 1.0, {})] * 2
    assert fn.distributed(1, 3, 4, 5, scale=0.5, tag="t") == [(1, 3, (4, 5), 0.5, {"tag": "t"})] * 2


def test_the_callers_cwd_sys_path_and_environment_at_call_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    package_dir = tmp_path / "pkgs"
    package_dir.mkdir()
    (package_dir / "air_helper_mod.py").write_text("VALUE = 'from the caller path'\n")
    work = tmp_path / "work"
    work.mkdir()

    def context() -> tuple:
        import air_helper_mod

        return os.getcwd(), air_helper_mod.VALUE, os.environ.get("AIR_TEST_VALUE")

    fn = cpu2(context)  # decorated before the caller changes anything
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(package_dir))
    monkeypatch.setenv("AIR_TEST_VALUE", "set after decoration")
    assert fn.distributed() == [(str(work), "from the caller path", "set after decoration")] * 2


@pytest.mark.slow
def test_the_same_function_runs_again_and_again() -> None:
    fn = cpu2(all_reduce_sum)
    assert [fn.distributed(float(i)) for i in range(4)] == [[2 * i + 1.0] * 2 for i in range(4)]


@pytest.mark.slow
def test_spawn_start_method_gives_fresh_interpreters(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_START_METHOD", "spawn")

    def interpreter() -> tuple:
        import sys

        bootstrap = sys.orig_argv[sys.orig_argv.index("-c") + 1]  # the code this interpreter was started with
        return bootstrap.split(" import main")[0].split()[-1], all_reduce_sum(1.0)

    assert cpu2(interpreter).distributed() == [("databricks.air._engine.rank", 3.0)] * 2
    monkeypatch.setenv("DATABRICKS_AIR_START_METHOD", "fork")
    assert cpu2(interpreter).distributed() == [("databricks.air._engine.rank_server", 3.0)] * 2


def test_an_unknown_start_method_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from databricks.air.exceptions import RuntimeConfigurationError

    monkeypatch.setenv("DATABRICKS_AIR_START_METHOD", "threads")
    with pytest.raises(RuntimeConfigurationError, match="fork, spawn"):
        cpu2(rank_environment).distributed()


@pytest.mark.slow
def test_large_values_come_back_whole() -> None:
    def big() -> object:
        import torch

        return torch.full((64 * 1024 * 1024,), float(os.environ["RANK"]))  # 256 MB

    first, second = cpu2(big).distributed()
    assert first.numel() == second.numel() == 64 * 1024 * 1024
    assert float(first.min()) == float(first.max()) == 0.0
    assert float(second.min()) == float(second.max()) == 1.0


def test_returned_values_are_freed_as_soon_as_the_caller_drops_them() -> None:
    """Nothing of a finished call holds on to its values (they may be gigabytes) until a garbage collection."""
    import gc
    import weakref

    def tensor() -> object:
        import torch

        return torch.ones(4)

    gc.disable()  # a collection would hide a reference cycle
    try:
        values = cpu2(tensor).distributed()
        kept = [weakref.ref(value) for value in values]
        del values
        assert [ref() for ref in kept] == [None, None]
    finally:
        gc.enable()


def test_a_call_reports_its_log_directory(capfd: pytest.CaptureFixture[str]) -> None:
    def talk() -> None:
        print(f"hello from {os.environ['RANK']}")

    fn = cpu2(talk)
    fn.distributed()
    log_dir = Path(fn.last_log_dir)
    assert str(log_dir) in capfd.readouterr().err
    assert (log_dir / "rank_0.txt").read_text() == "hello from 0\n"
    assert (log_dir / "rank_1.txt").read_text() == "hello from 1\n"
    assert log_dir.parent == Path(os.environ["DATABRICKS_AIR_LOG_DIR"])


NOTEBOOK_STYLE = """
    # No __main__ guard, as in a notebook: ranks must not re-run this file.
    import os
    print("TOP LEVEL RAN")
    from databricks.air import distributed

    class Scaler:
        def __init__(self, factor):
            self.factor = factor

        def apply(self, value):
            return value * self.factor

    OFFSET = 100

    def helper(value):
        return value + OFFSET

    @distributed(num_accelerators=2, accelerator_type="CPU")
    def train(scaler):
        import torch.distributed as dist
        dist.init_process_group("gloo")
        rank = dist.get_rank()
        dist.destroy_process_group()
        return helper(scaler.apply(rank)), Scaler(rank)

    results = train.distributed(Scaler(10))
    print("RESULTS", [r[0] for r in results], all(isinstance(r[1], Scaler) for r in results))
"""


def test_notebook_style_code_in_main_travels_by_value(run_script) -> None:
    done = run_script(NOTEBOOK_STYLE)
    assert done.returncode == 0, done.stderr
    assert "RESULTS [100, 110] True" in done.stdout
    assert done.stdout.count("TOP LEVEL RAN") == 1


def test_a_master_port_in_use_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    from databricks.air.exceptions import RuntimeConfigurationError

    with socket.socket() as busy:
        busy.bind(("", 0))
        busy.listen()
        monkeypatch.setenv("MASTER_PORT", str(busy.getsockname()[1]))
        with pytest.raises(RuntimeConfigurationError, match="MASTER_PORT=.*unset MASTER_PORT"):
            cpu2(rank_environment).distributed()
    monkeypatch.setenv("MASTER_PORT", "not-a-port")
    with pytest.raises(RuntimeConfigurationError, match="MASTER_PORT must be a port number"):
        cpu2(rank_environment).distributed()


def test_without_a_hosted_store_rank_zero_hosts_it_on_a_free_port() -> None:
    """Where the rank server cannot host the store (no torch.distributed there), plain env:// init still works."""
    from databricks.air._engine import launch as engine
    from databricks.air._engine.local_call import LocalCall

    from databricks.air._engine.rank_server import NO_STORE_HERE

    class NoStoreServer:
        def request(self, message: dict) -> dict:
            assert message["op"] == "store" and message["host"] == "127.0.0.1"
            return {"op": "error", "message": f"{NO_STORE_HERE}: No module named 'torch'"}

    plan = engine.Launch(
        name="f",
        world_size=2,
        function=b"",
        arguments=b"",
        environ={"TORCHELASTIC_USE_AGENT_STORE": "True"},
        cwd=".",
        sys_path=[],
        argv=[],
        log_dir=".",
    )
    call = LocalCall(plan)
    call.server = NoStoreServer()  # type: ignore[assignment]
    environ = call._common_environ()
    assert "TORCHELASTIC_USE_AGENT_STORE" not in environ
    assert 0 < int(environ["MASTER_PORT"]) < 65536


def test_modules_to_preload_and_problems_preloading_them(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DATABRICKS_AIR_PRELOAD", "wave, no_such_module_for_air")

    def preloaded() -> bool:
        import sys

        return "wave" in sys.modules  # nothing else imports it

    assert cpu2(preloaded).distributed() == [True, True]
    assert "could not preload no_such_module_for_air: ModuleNotFoundError" in capfd.readouterr().err


def test_without_preloading_a_module_is_not_there() -> None:
    def imported() -> bool:
        import sys

        return "wave" in sys.modules

    assert cpu2(imported).distributed() == [False, False]
