"""The saved position of a dataset (and of the DataLoader around it): a small, versioned, JSON-ready dict.

A position is ``(epoch, delivered)``: the epoch, and how many of this rank's files of that epoch the training loop
has received. Because every epoch's order is a pure function of the listing and the settings, that is all a
resumed run needs: it skips the first ``delivered`` files of the epoch without opening them. The state also records
what the order depends on (listing fingerprint, world size, rank, shuffle, seed, equalize), so that loading it
where it does not fit raises an error that says what differs instead of resuming on the wrong files.

Format, version 2::

    {"version": 2, "rank": 0, "world_size": 2, "epoch": 3, "delivered": 40,
     "shuffle": true, "seed": 7, "equalize": "pad",
     "listing": {"count": 1000, "sha256": "0f1e2d3c4b5a6978"}, "skipped": []}

The DataLoader adds ``num_workers``, ``batch_size`` and ``drop_last``; they may change between save and load
(the remaining files are dealt to the new workers in the same order).
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping, Tuple

from databricks.air.data.errors import StateMismatchError

STATE_VERSION = 2
_REQUIRED = ("version", "rank", "world_size", "epoch", "delivered", "shuffle", "seed", "equalize", "listing")


def check_state(state: Any, expected: Mapping[str, Any], share: int, root: str) -> Tuple[int, int, List[str]]:
    """Validate a saved state against this dataset; return its ``(epoch, delivered, skipped)``."""
    if not isinstance(state, Mapping):
        raise TypeError(f"load_state_dict expects the dict that state_dict() returned, not {type(state).__name__}")
    version = state.get("version")
    if version != STATE_VERSION:
        if version == 1:
            raise StateMismatchError(
                "this state has version 1, the reference package's per-worker format, which records positions "
                "in another partition of the files; it cannot resume here. Start the epoch over instead "
                "(do not load it), or resume with the package that saved it."
            )
        raise StateMismatchError(
            f"unsupported state version {version!r}: this version of databricks.air.data reads and writes "
            f"version {STATE_VERSION}. Was the dict produced by UCVolumeDataset/DataLoader.state_dict()?"
        )
    missing = [key for key in _REQUIRED if key not in state]
    if missing:
        raise StateMismatchError(f"the state is missing {', '.join(missing)}; pass the dict state_dict() returned")
    saved_listing = state["listing"]
    if not isinstance(saved_listing, Mapping) or dict(saved_listing) != dict(expected["listing"]):
        raise StateMismatchError(
            f"the state was saved for a listing of {_describe(saved_listing)}, but this dataset lists "
            f"{_describe(expected['listing'])} under {root}: the folder's files changed since the state was saved "
            "(or this is another folder). Resume with the same files, or start the epoch over without loading it."
        )
    if state["world_size"] != expected["world_size"]:
        raise StateMismatchError(
            f"the state was saved with world_size={state['world_size']} but this run has "
            f"world_size={expected['world_size']}: a saved position resumes only on the same number of ranks. "
            f"Resume with {state['world_size']} ranks, or start the epoch over (set_epoch) without loading it."
        )
    if state["rank"] != expected["rank"]:
        raise StateMismatchError(
            f"this is the state of rank {state['rank']}, loaded on rank {expected['rank']}: each rank must load "
            "its own state (save it under a key that includes the rank)."
        )
    for key in ("shuffle", "seed", "equalize"):
        if state[key] != expected[key]:
            raise StateMismatchError(
                f"the state was saved with {key}={state[key]!r} but this dataset has {key}={expected[key]!r}; the "
                f"epoch's order depends on it. Build the dataset with {key}={state[key]!r} to resume."
            )
    epoch, delivered = state["epoch"], state["delivered"]
    for key, value in (("epoch", epoch), ("delivered", delivered)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise StateMismatchError(f"the state's {key} must be an int >= 0, not {value!r}")
    if delivered > share:
        raise StateMismatchError(
            f"the state says {delivered} files were delivered in epoch {epoch}, but this rank's share of an epoch "
            f"is {share} files"
        )
    skipped = state.get("skipped", [])
    if not isinstance(skipped, list):
        raise StateMismatchError(f"the state's skipped must be a list of file names, not {skipped!r}")
    return epoch, delivered, list(skipped)


def _describe(listing: Any) -> str:
    if isinstance(listing, Mapping):
        return f"{listing.get('count')} files (sha256 {listing.get('sha256')})"
    return repr(listing)


def build_state(**fields: Any) -> Dict[str, Any]:
    """The state dict with its version first."""
    return {"version": STATE_VERSION, **fields}
