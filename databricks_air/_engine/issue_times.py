"""The rank's side of the straggler watch: when this rank issued each collective since a given one, and how long it
waited for data, for the probe's ``times`` request (:mod:`~databricks.air._engine.rank_probe`).

The issue times are torch's flight recorder's (``time_created_ns``, this machine's clock), read from its pickled dump
without stack traces: the recorder offers no read of part of its ring, so the whole ring (2,000 entries by default)
is dumped and only the entries after ``since`` are sent, as ``[seq, time_created_ns, op]`` with the ops named once
per group. Measured on a 2-vCPU VM with a full ring: 30 to 80 ms for the dump and 5 to 15 ms to read it, once per
``DATABRICKS_AIR_STRAGGLER_SECONDS``.

The wait for data is ``databricks.air.data.waiting``'s totals, read only when the rank's code imported it (through
our DataLoader): this module never imports the data package.
"""

from __future__ import annotations

import json
import pickle
import sys
from typing import Any, Dict, List, Mapping, Optional

DATA_MODULE = "databricks.air.data.waiting"
"""The module our DataLoader counts its waits in (a name: the engine does not import the data package)."""


def parse_request(text: str) -> Dict[str, int]:
    """``since`` from the text after ``times`` (``{"0": 41}``: the last sequence number already seen, per group)."""
    text = text.strip()
    if not text:
        return {}
    try:
        since = json.loads(text)
        return {str(group): int(seq) for group, seq in since.items()}
    except (ValueError, TypeError, AttributeError):
        return {}


def read(since: Mapping[str, int]) -> Dict[str, Any]:
    """``{"groups": {id: {"enqueued", "ops", "issued": [[seq, ns, op index]...]}}, "data": {...} or None}``, or with
    ``"unavailable": reason`` in place of the groups."""
    answer: Dict[str, Any] = {"data": data_wait()}
    c10d = _loaded_c10d()
    if c10d is None:
        answer["groups"] = {}
        return answer
    try:
        trace = _trace(c10d)
    except Exception as error:  # noqa: BLE001 - never let a probe break the rank
        answer["unavailable"] = f"the flight recorder dump failed: {type(error).__name__}: {error}"
        return answer
    if trace is None:
        answer["unavailable"] = "this torch has no flight recorder dump"
        return answer
    groups: Dict[str, Any] = {}
    for group_id, status in (trace.get("pg_status") or {}).items():
        groups[str(group_id)] = {"enqueued": int(status.get("last_enqueued_collective", -1)), "ops": [], "issued": []}
    op_index: Dict[str, Dict[str, int]] = {}
    for entry in trace.get("entries") or []:
        if entry.get("is_p2p"):
            continue
        group_id = str((list(entry.get("process_group") or [""]) + [""])[0])
        group = groups.get(group_id)
        seq = int(entry.get("collective_seq_id", -1))
        if group is None or seq <= since.get(group_id, 0):
            continue
        op = str(entry.get("profiling_name", "")).split(":", 1)[-1]
        ops = op_index.setdefault(group_id, {})
        if op not in ops:
            ops[op] = len(group["ops"])
            group["ops"].append(op)
        group["issued"].append([seq, int(entry.get("time_created_ns", 0)), ops[op]])
    answer["groups"] = groups
    return answer


def data_wait() -> Optional[Dict[str, float]]:
    """The seconds this process waited in our DataLoader's ``next()`` and the batches it took, in total; ``None``
    when it never imported our DataLoader."""
    module = sys.modules.get(DATA_MODULE)
    if module is None:
        return None
    return {"seconds": float(getattr(module, "seconds", 0.0)), "batches": int(getattr(module, "batches", 0))}


def _trace(c10d: Any) -> Optional[Dict[str, Any]]:
    dump = getattr(c10d, "_dump_fr_trace", None)
    if dump is not None:  # pickled, without stacks: a third of the JSON dump's cost
        return pickle.loads(dump(includeCollectives=True, includeStackTraces=False, onlyActive=False))
    dump_json = getattr(c10d, "_dump_fr_trace_json", None)
    if dump_json is not None:
        return json.loads(dump_json(includeCollectives=True, onlyActive=False))
    return None


def _loaded_c10d() -> Optional[Any]:
    if "torch.distributed" not in sys.modules:
        return None
    torch_c = sys.modules.get("torch._C")
    return getattr(torch_c, "_distributed_c10d", None)


def since_request(since: Mapping[str, int], limit: int) -> str:
    """The probe request for the entries after ``since``, within ``limit`` bytes (past it: every entry)."""
    request = "times " + json.dumps(dict(since), separators=(",", ":"))
    return request if len(request.encode()) <= limit else "times"


def issued(groups: Mapping[str, Any]) -> Dict[str, List[List[Any]]]:
    """``read``'s groups as ``{group: [[seq, seconds, op]...]}`` (issue times in this rank's clock, seconds)."""
    result: Dict[str, List[List[Any]]] = {}
    for group_id, group in groups.items():
        ops = list(group.get("ops") or [])
        result[str(group_id)] = [
            [int(seq), int(ns) / 1e9, ops[index] if 0 <= index < len(ops) else "?"]
            for seq, ns, index in group.get("issued") or []
        ]
    return result
