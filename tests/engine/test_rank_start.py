"""A rank starts as a worker of ``torchrun script.py ARGS`` would, although it is a fork of the rank server.

* every random generator it inherits is drawn afresh in each rank of each call, and a function that seeds decides;
* ``sys.argv`` is the caller's, so an ``argparse`` ``main()`` wrapped in the decorator works;
* classes and functions that came by value from the caller's ``__main__`` can be pickled again in the rank: by
  name (``pickle``, ``torch.save``), and by value into the processes the rank spawns (a spawn ``DataLoader``,
  ``torch.multiprocessing.spawn``);
* such code keeps its file name and source: ``inspect.getsource``, ``linecache``, tracebacks and
  ``torch.jit.script`` work as in the caller;
* packages that read the rank when imported are never preloaded into the rank server.

The same in a notebook kernel, where the source of the code exists only in the kernel, is at the end.
"""

from __future__ import annotations

import ast
import os
import random
import re
import uuid
from pathlib import Path
from typing import Any, List

import pytest

from databricks.air import distributed
from process_helpers import processes_with_marker, wait_until
from kernel_support import kernel_env, kernel_specs, notebook_client, texts, write_notebook  # noqa: F401 (a fixture)

cpu2 = distributed(num_accelerators=2, accelerator_type="CPU", timeout=180)


def last_line(output: str) -> Any:
    return ast.literal_eval(output.strip().splitlines()[-1])


# --- random state -------------------------------------------------------------------------------------------------


def draws() -> tuple:
    import numpy
    import torch

    return torch.initial_seed(), torch.rand(1).item(), random.random(), float(numpy.random.rand())


def seeded_draws() -> tuple:
    import numpy
    import torch

    torch.manual_seed(7)
    random.seed(7)
    numpy.random.seed(7)
    return draws()


def test_every_generator_a_rank_inherits_is_drawn_afresh_in_each_rank_of_each_call() -> None:
    results: List[tuple] = cpu2(draws).distributed() + cpu2(draws).distributed()
    seeds, torch_draws, python_draws, numpy_draws = zip(*results)
    for name, values in (
        ("torch seed", seeds),
        ("torch", torch_draws),
        ("random", python_draws),
        ("numpy", numpy_draws),
    ):
        assert len(set(values)) == 4, f"{name}: {values}"


def test_a_function_that_seeds_draws_the_same_numbers_in_every_rank_and_call() -> None:
    import numpy
    import torch

    results = cpu2(seeded_draws).distributed() + cpu2(seeded_draws).distributed()
    state = torch.get_rng_state(), random.getstate(), numpy.random.get_state()
    try:
        here = seeded_draws()
    finally:
        torch.set_rng_state(state[0])
        random.setstate(state[1])
        numpy.random.set_state(state[2])
    assert results == [here] * 4


# --- sys.argv -----------------------------------------------------------------------------------------------------


def test_an_argparse_main_wrapped_in_the_decorator_parses_the_callers_arguments(run_script) -> None:
    done = run_script(
        """
        import argparse
        import sys

        from databricks.air import distributed


        @distributed(num_accelerators=2, accelerator_type="CPU")
        def main():
            parser = argparse.ArgumentParser()
            parser.add_argument("--lr", type=float, required=True)
            parser.add_argument("--epochs", type=int, default=1)
            args = parser.parse_args()
            return args.lr, args.epochs, sys.argv


        if __name__ == "__main__":
            print(main.distributed())
        """,
        args=["--lr", "0.5", "--epochs", "3"],
    )
    assert done.returncode == 0, done.stderr
    script = str(Path(done.args[1]))
    assert last_line(done.stdout) == [(0.5, 3, [script, "--lr", "0.5", "--epochs", "3"])] * 2


# --- code shipped by value, pickled again in the rank -------------------------------------------------------------

PICKLED_AGAIN = """
    import os
    import pickle
    import sys

    import torch
    import torch.multiprocessing as mp
    from torch.utils.data import DataLoader, Dataset

    from databricks.air import distributed


    class Squares(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, index):
            return torch.tensor([index * index])


    def note_worker(worker_id):
        os.environ["AIR_TEST_WORKER"] = str(worker_id)


    def child(index, path):
        with open(path, "w") as stream:
            stream.write(f"child {index} saw {Squares()[3].item()}")


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(2, 1)


    @distributed(num_accelerators=1, accelerator_type="CPU")
    def pickled_again(folder):
        loader = DataLoader(Squares(), batch_size=4, num_workers=2, multiprocessing_context="spawn",
                            worker_init_fn=note_worker)
        batches = [batch.flatten().tolist() for batch in loader]
        path = os.path.join(folder, "child.txt")
        mp.spawn(child, args=(path,), nprocs=1)
        with open(path) as stream:
            spawned = stream.read()
        by_name = type(pickle.loads(pickle.dumps(Squares()))) is Squares  # pickle finds __main__.Squares here
        torch.save(Net(), os.path.join(folder, "net.pt"))  # the whole model, its class by name
        return batches, spawned, by_name


    if __name__ == "__main__":
        print(pickled_again.distributed(os.getcwd()))
        print(type(torch.load("net.pt", weights_only=False)) is Net)  # the caller loads what the rank saved
"""


@pytest.mark.slow
def test_classes_and_functions_of_the_callers_script_can_be_pickled_again_in_the_rank(run_script) -> None:
    done = run_script(PICKLED_AGAIN, timeout=240)
    assert done.returncode == 0, done.stderr
    *_, result, loaded = done.stdout.strip().splitlines()
    batches, spawned, by_name = ast.literal_eval(result)[0]
    assert batches == [[0, 1, 4, 9], [16, 25, 36, 49]]
    assert spawned == "child 0 saw 9"
    assert by_name is True
    assert loaded == "True"


# --- code shipped by value keeps its file and source --------------------------------------------------------------

SOURCE = """
    import inspect
    import linecache

    import torch

    from databricks.air import distributed


    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2


    class Doubler(torch.nn.Module):
        def forward(self, x):
            return scale(x)


    def check_batch_size(size):
        if size % 2:
            raise ValueError(f"batch size {size} is odd")


    @distributed(num_accelerators=2, accelerator_type="CPU")
    def with_source():
        code = scale.__code__
        return (
            inspect.getsource(scale),
            linecache.getline(code.co_filename, code.co_firstlineno + 1),
            code.co_filename,
            torch.jit.script(scale)(torch.ones(1)).item(),
            torch.jit.script(Doubler())(torch.ones(1)).item(),
        )


    @distributed(num_accelerators=2, accelerator_type="CPU")
    def fails():
        check_batch_size(3)


    if __name__ == "__main__":
        print(with_source.distributed())
        try:
            fails.distributed()
        except ValueError as error:
            print("REMOTE TRACEBACK", repr(error.remote_traceback))
            print("REPORT", repr(str(error)))
            print("RANK LOG", repr(open(error.log_dir + "/rank_0.txt").read()))
"""


@pytest.mark.slow
def test_code_of_the_callers_script_has_its_file_and_source_in_the_rank(run_script) -> None:
    done = run_script(SOURCE)
    assert done.returncode == 0, done.stderr
    script = done.args[1]
    results = ast.literal_eval(done.stdout.splitlines()[0])
    assert results[0] == results[1]
    source, line, filename, scripted, doubled = results[0]
    assert source == "def scale(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n"
    assert line == "    return x * 2\n"
    assert filename == script
    assert scripted == doubled == 2.0

    # The error's traceback, its report and rank 0's log name the script's lines, with their source.
    shown = [
        ast.literal_eval(re.search(rf"^{label} (.*)$", done.stdout, re.MULTILINE).group(1))
        for label in ("REMOTE TRACEBACK", "REPORT", "RANK LOG")
    ]
    number = SOURCE.splitlines().index('            raise ValueError(f"batch size {size} is odd")') + 1
    expected = (
        f'  File "{script}", line {number}, in check_batch_size\n    raise ValueError(f"batch size {{size}} is odd")'
    )
    for text in shown:
        assert expected in text, text
        assert "<dynamic-code>" not in text


# --- packages that read the rank at import ------------------------------------------------------------------------


def lightning_ranks() -> tuple:
    from pytorch_lightning.utilities import rank_zero_only

    return rank_zero_only.rank, int(os.environ["RANK"])


@pytest.mark.slow
def test_lightning_is_not_preloaded_since_it_reads_the_rank_at_import(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pytorch_lightning")
    monkeypatch.setenv("DATABRICKS_AIR_PRELOAD", "pytorch_lightning")
    assert cpu2(lightning_ranks).distributed() == [(0, 0), (1, 1)]
    assert (
        "not preloading pytorch_lightning: it reads the rank (RANK, LOCAL_RANK) when imported" in capfd.readouterr().err
    )


@pytest.mark.slow
def test_a_preload_that_imports_lightning_makes_ranks_start_as_new_interpreters(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("pytorch_lightning")
    (tmp_path / "air_test_uses_lightning.py").write_text("import pytorch_lightning\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setenv("DATABRICKS_AIR_PRELOAD", "air_test_uses_lightning")
    assert cpu2(lightning_ranks).distributed() == [(0, 0), (1, 1)]
    err = capfd.readouterr().err
    assert "DATABRICKS_AIR_PRELOAD imported lightning_fabric, pytorch_lightning, torchmetrics, which read" in err
    assert "ranks start as new interpreters instead" in err


# --- in a notebook kernel -----------------------------------------------------------------------------------------

NOTEBOOK_DEFINITIONS = """
    import inspect, os, pickle, sys
    import torch
    from torch.utils.data import DataLoader, Dataset
    from databricks.air import distributed

    class Squares(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, index):
            return torch.tensor([index * index])

    def scale(x: torch.Tensor) -> torch.Tensor:
        return x * 2
"""

NOTEBOOK_CALL = """
    @distributed(num_accelerators=1, accelerator_type="CPU")
    def in_the_rank():
        loader = DataLoader(Squares(), batch_size=2, num_workers=2, multiprocessing_context="spawn")
        return (
            [batch.flatten().tolist() for batch in loader],
            inspect.getsource(scale),
            torch.jit.script(scale)(torch.ones(1)).item(),
            sys.argv,
        )

    print("RESULT", in_the_rank.distributed())
    print("KERNEL ARGV", sys.argv)
"""

NOTEBOOK_FAILURE = """
    def check(size):
        raise ValueError(f"batch size {size} is odd")

    @distributed(num_accelerators=1, accelerator_type="CPU")
    def fails():
        check(3)

    try:
        fails.distributed()
    except ValueError as error:
        print("REMOTE TRACEBACK", repr(error.remote_traceback))
"""


@pytest.mark.slow
def test_notebook_code_is_pickled_again_and_has_its_source_in_the_rank(
    tmp_path: Path,
    kernel_specs: Any,
) -> None:
    marker = uuid.uuid4().hex
    nb = write_notebook(tmp_path / "ranks.ipynb", NOTEBOOK_DEFINITIONS, NOTEBOOK_CALL, NOTEBOOK_FAILURE)
    client = notebook_client(nb, tmp_path, kernel_specs)
    client.execute(env=kernel_env(tmp_path, marker), cleanup_kc=True)
    _, call, failure = nb.cells
    stdout = texts(call, "stdout")
    result = ast.literal_eval(re.search(r"^RESULT (.*)$", stdout, re.MULTILINE).group(1))
    kernel_argv = ast.literal_eval(re.search(r"^KERNEL ARGV (.*)$", stdout, re.MULTILINE).group(1))
    batches, source, scripted, argv = result[0]
    assert batches == [[0, 1], [4, 9]]
    assert source == "def scale(x: torch.Tensor) -> torch.Tensor:\n    return x * 2\n"
    assert scripted == 2.0
    assert argv == kernel_argv and "ipykernel_launcher" in kernel_argv[0]

    # The cell's file (IPython's name for it) and its line, with the source the kernel holds.
    remote = ast.literal_eval(re.search(r"^REMOTE TRACEBACK (.*)$", texts(failure, "stdout"), re.MULTILINE).group(1))
    assert re.search(
        r'File "[^"]+\.py", line 2, in check\n    raise ValueError\(f"batch size \{size\} is odd"\)', remote
    ), remote
    assert "<dynamic-code>" not in remote
    assert wait_until(lambda: not processes_with_marker(marker), timeout=30)
