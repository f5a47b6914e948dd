"""Resuming mid-epoch: exactly the rest, in order, in a new process; repeated resumes; epoch edges; bad states."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import pytest

from databricks.air.data import DataLoader, UCVolumeDataset
from databricks.air.data.errors import StateMismatchError

from .conftest import RemoteFileSystem

N_FILES = 9  # rank 1 of 2: a share of 5 with one padded file


def _config_key(config: Dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def _loader(folder: Path, config: Dict[str, Any]) -> DataLoader:
    dataset = UCVolumeDataset(folder, rank=1, world_size=2, shuffle=True, seed=11, cache=config["cache"])
    kwargs: Dict[str, Any] = {"batch_size": config["batch"], "num_workers": config["workers"]}
    if config["workers"]:
        kwargs.update(prefetch_factor=config["prefetch"], persistent_workers=config["persistent"])
    return DataLoader(dataset, **kwargs)


def _flat(batches: List[Any]) -> List[str]:
    names = []
    for batch in batches:
        names += [os.path.basename(p) for p in (batch if isinstance(batch, list) else [batch])]
    return names


def _sweep() -> List[Dict[str, Any]]:
    """Every batch size with no workers and with 1, 2 and 4 workers; the four (prefetch_factor,
    persistent_workers) pairs each appear with every worker count and every batch size."""
    configs = [
        {"workers": 0, "batch": batch, "prefetch": None, "persistent": False, "cache": False} for batch in (None, 1, 4)
    ]
    pairs = list(itertools.product((1, 4), (True, False)))
    for index, (workers, batch) in enumerate(itertools.product((1, 2, 4), (None, 1, 4))):
        prefetch, persistent = pairs[index % len(pairs)]
        configs.append(
            {"workers": workers, "batch": batch, "prefetch": prefetch, "persistent": persistent, "cache": workers == 2}
        )  # the cache's pinning is exercised on a slice of the sweep
    return configs


RESUME_IN_CHILD = """
import json, os, sys
sys.path.insert(0, {tests!r})
from data.test_resume import _loader, _flat, _config_key
from pathlib import Path
cases = json.load(open({cases!r}))
results = {{}}
for case in cases:
    loader = _loader(Path(case["folder"]), case["config"])
    loader.load_state_dict(case["state"])
    rest = _flat(list(loader))
    following = _flat(list(loader)) if case["following"] else None
    results[case["id"]] = {{"rest": rest, "following": following}}
json.dump(results, open({out!r}, "w"))
"""


@pytest.mark.slow
def test_d1_d3_d4_a_fresh_loader_in_a_new_process_yields_exactly_the_rest(
    files: Callable[..., Path], tmp_path: Path
) -> None:
    folder = files(N_FILES)
    cases = []
    expected = {}
    for config in _sweep():
        loader = _loader(folder, config)
        states = [loader.state_dict()]
        batches = []
        for batch in loader:
            batches.append(batch)
            states.append(json.loads(json.dumps(loader.state_dict())))
        next_epoch = _flat(list(loader))
        total = len(batches)
        assert total == len(loader)
        for k, state in enumerate(states):
            if config["workers"] in (1, 4) and k not in (1, total):
                continue  # every k with 0 and 2 workers; one step in and the epoch edge with 1 and 4
            case_id = f"{_config_key(config)}@{k}"
            following = k == 1 and (config["persistent"] or config["workers"] == 0)
            cases.append(
                {"id": case_id, "folder": str(folder), "config": config, "state": state, "following": following}
            )
            expected[case_id] = (_flat(batches[k:]) if k < total else next_epoch, next_epoch, k, total)
    cases_file, out_file = tmp_path / "cases.json", tmp_path / "out.json"
    cases_file.write_text(json.dumps(cases))
    script = RESUME_IN_CHILD.format(tests=str(Path(__file__).parent.parent), cases=str(cases_file), out=str(out_file))
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(out_file.read_text())
    assert len(results) == len(cases) >= 40
    for case_id, (rest, following, k, total) in expected.items():
        got = results[case_id]
        assert got["rest"] == rest, case_id  # D1: no duplicates, nothing missing, same order
        if got["following"] is not None:
            assert got["following"] == following, case_id  # D4: the epoch after a resumed one is full
        if k == total:
            assert got["rest"] == following and len(rest) > 0, case_id  # D3: k = total starts the next epoch


def test_d3_resume_at_k_zero_yields_the_whole_epoch(files: Callable[..., Path]) -> None:
    folder = files(12)
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=5, num_workers=0)
    state = loader.state_dict()
    assert state["epoch"] == 0 and state["delivered"] == 0
    whole = _flat(list(loader))
    fresh = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=5, num_workers=0)
    fresh.load_state_dict(state)
    assert _flat(list(fresh)) == whole


def test_d3_at_the_last_batch_the_state_already_points_to_the_next_epoch(files: Callable[..., Path]) -> None:
    folder = files(8)
    loader = DataLoader(UCVolumeDataset(folder), batch_size=3, num_workers=2, drop_last=True)
    iterator = iter(loader)
    next(iterator)
    next(iterator)  # the last full batch: 2 files left, dropped
    assert (loader.state_dict()["epoch"], loader.state_dict()["delivered"]) == (1, 0)


def test_d2_repeated_resumes_stay_aligned_with_the_uninterrupted_run(files: Callable[..., Path]) -> None:
    folder = files(40)

    def make() -> DataLoader:
        return DataLoader(
            UCVolumeDataset(folder, shuffle=True, seed=2), batch_size=3, num_workers=2, persistent_workers=True
        )

    uninterrupted = _flat(list(make()))
    received: List[str] = []
    state: Optional[dict] = None
    for steps in (2, 3, 1, 4):  # four runs, each resuming from the last one's state
        loader = make()
        if state is not None:
            loader.load_state_dict(state)
        iterator = iter(loader)
        received += _flat([next(iterator) for _ in range(steps)])
        state = json.loads(json.dumps(loader.state_dict()))
        del iterator, loader
    loader = make()
    loader.load_state_dict(state)
    received += _flat(list(loader))
    assert received == uninterrupted


def test_workers_and_batch_size_may_change_between_save_and_resume(files: Callable[..., Path]) -> None:
    folder = files(30)
    first = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=2)
    iterator = iter(first)
    taken = _flat([next(iterator) for _ in range(3)])
    rest = _flat(list(iterator))
    other = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=5, num_workers=3, persistent_workers=False)
    other.load_state_dict(first.state_dict() if False else {**json.loads(json.dumps(_state_after(folder, 3)))})
    assert _flat(list(other)) == rest
    assert len(taken) == 12


def _state_after(folder: Path, batches: int) -> dict:
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=0)
    iterator = iter(loader)
    for _ in range(batches):
        next(iterator)
    return loader.state_dict()


def test_d5_loading_then_saving_round_trips_byte_for_byte(files: Callable[..., Path]) -> None:
    folder = files(10)
    state = _state_after(folder, 1)
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=2)
    loader.load_state_dict(state)
    assert json.dumps(loader.state_dict()) == json.dumps({**state, "num_workers": 2})


def test_d5_a_state_loaded_during_an_iteration_stops_it_and_the_next_iteration_resumes(
    files: Callable[..., Path],
) -> None:
    folder = files(10)
    state = _state_after(folder, 2)  # 8 of 10 delivered
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=0)
    running = iter(loader)
    next(running)
    loader.load_state_dict(state)
    with pytest.raises(RuntimeError, match="position changed.*iter\\(loader\\)"):
        next(running)
    assert len(_flat(list(loader))) == 2  # the loaded position, not silently restarted from zero
    iterating = iter(loader.dataset)
    next(iterating)
    loader.dataset.set_epoch(5)
    with pytest.raises(RuntimeError, match="start a new one"):
        next(iterating)


def test_set_epoch_with_the_saved_epoch_keeps_the_saved_position(files: Callable[..., Path]) -> None:
    folder = files(10)
    state = _state_after(folder, 1)
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=0)
    loader.load_state_dict(state)
    loader.set_epoch(0)  # the usual `for epoch in range(start, n): loader.set_epoch(epoch)` loop
    assert len(_flat(list(loader))) == 6


def test_d6_the_state_is_small_versioned_json_with_a_fingerprint(files: Callable[..., Path]) -> None:
    state = _state_after(files(1000), 3)
    text = json.dumps(state)
    assert len(text.encode()) < 4096
    assert state["version"] == 2
    assert {"epoch", "delivered", "seed", "world_size", "num_workers", "listing"} <= set(state)
    assert state["listing"]["count"] == 1000 and len(state["listing"]["sha256"]) == 16


def test_d6_a_changed_folder_is_refused_naming_both_fingerprints(files: Callable[..., Path]) -> None:
    folder = files(10)
    state = _state_after(folder, 1)
    (folder / "new.bin").write_bytes(b"new")
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=0)
    with pytest.raises(StateMismatchError) as caught:
        loader.load_state_dict(state)
    message = str(caught.value)
    assert state["listing"]["sha256"] in message and loader.dataset.listing.fingerprint in message
    assert "10 files" in message and "11 files" in message and isinstance(caught.value, ValueError)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"world_size": 4}, "saved with world_size=4 but this run has world_size=1"),
        ({"rank": 1, "world_size": 1}, "state of rank 1, loaded on rank 0"),
        ({"seed": 3}, "saved with seed=3"),
        ({"shuffle": False}, "saved with shuffle=False"),
        ({"version": 1}, "version 1, the reference package's per-worker format"),
        ({"version": 9}, "unsupported state version 9"),
        ({"delivered": -1}, "delivered must be an int >= 0"),
        ({"delivered": 11}, "share of an epoch is 10 files"),
    ],
)
def test_d6_states_that_do_not_fit_say_what_differs(files: Callable[..., Path], change: dict, message: str) -> None:
    folder = files(10)
    state = {**_state_after(folder, 1), **change}
    loader = DataLoader(UCVolumeDataset(folder, shuffle=True), batch_size=4, num_workers=0)
    with pytest.raises(ValueError, match=message):
        loader.load_state_dict(state)
    with pytest.raises(TypeError, match="expects the dict"):
        loader.load_state_dict("not a state")  # type: ignore[arg-type]


def test_d7_resuming_opens_none_of_the_skipped_files(files: Callable[..., Path], tmp_path: Path) -> None:
    folder = files(20)
    log = str(tmp_path / "copies.log")
    state = None
    loader = DataLoader(UCVolumeDataset(folder, filesystem=RemoteFileSystem(log)), batch_size=4, num_workers=0)
    iterator = iter(loader)
    delivered = _flat([next(iterator) for _ in range(3)])
    state = loader.state_dict()
    del iterator, loader
    os.unlink(log)
    resumed = DataLoader(UCVolumeDataset(folder, filesystem=RemoteFileSystem(log)), batch_size=4, num_workers=2)
    resumed.load_state_dict(state)
    rest = _flat(list(resumed))
    copied = RemoteFileSystem(log).logged()
    assert set(copied) == set(rest) and not set(copied) & set(delivered)
    assert all(count == 1 for count in copied.values())
