"""The fatal-line table: real lines from torch, NCCL, CUDA, gloo, the kernel and bash, and what each is."""

from __future__ import annotations

import subprocess
import sys

import pytest

from databricks.air import log_patterns
from databricks.air.log_patterns import PATTERNS, by_id, causes_first, match_line, scan

# (line as printed, the pattern id it must match)
REAL_LINES = [
    (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.11 GiB "
        "of which 1.06 GiB is free. Process 41523 has 78.04 GiB memory in use.",
        "cuda-oom",
    ),
    ("RuntimeError: CUDA error: out of memory", "cuda-oom"),
    (
        "[ 8123.456789] Out of memory: Killed process 41523 (python) total-vm:98765432kB, anon-rss:65432100kB",
        "host-oom-killer",
    ),
    (
        "[ 8123.456701] python invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0",
        "host-oom-killer",
    ),
    (
        "RuntimeError: DefaultCPUAllocator: can't allocate memory: you tried to allocate 1099511627776 bytes. Error code "
        "12 (Cannot allocate memory)",
        "host-alloc-failed",
    ),
    (
        "[rank1]:[E821 10:15:01.123456789 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation "
        "timeout: WorkNCCL(SeqNum=4, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600021 "
        "milliseconds before timing out.",
        "nccl-watchdog-timeout",
    ),
    (
        "[rank0]:[E821 10:15:01.223 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 0] Some NCCL operations have "
        "failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on "
        "corrupted/incomplete data.",
        "nccl-operations-failed",
    ),
    (
        "[rank0]:[E ProcessGroupNCCL.cpp:1484] [PG ID 0 PG GUID 0(default_pg) Rank 0] ProcessGroupNCCL's watchdog got "
        "stuck for 480 seconds without making progress in monitoring enqueued collectives.",
        "nccl-watchdog-stuck",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:"
        "3356, unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "nccl-system-error",
    ),
    (
        "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error (run with "
        "NCCL_DEBUG=INFO for details), NCCL version 2.21.5",
        "nccl-cuda-error",
    ),
    (
        "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.",
        "nccl-remote-error",
    ),
    (
        "gpu-node-3:41523:41601 [0] transport/net_ib.cc:1295 NCCL WARN NET/IB : Got async error event: port error",
        "nccl-transport-error",
    ),
    (
        "gpu-node-3:41523:41601 [2] misc/socket.cc:538 NCCL WARN Net : Connection closed by remote peer "
        "10.0.0.7<45678>",
        "nccl-transport-error",
    ),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", "cuda-illegal-memory-access"),
    (
        "../aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] Assertion "
        '`-sizes[i] <= index && index < sizes[i] && "index out of bounds"` failed. RuntimeError: CUDA error: '
        "device-side assert triggered",
        "cuda-illegal-memory-access",
    ),
    (
        "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
        "incorrect.",
        "cuda-error",
    ),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered", "gpu-ecc-error"),
    ("[ 7711.102938] NVRM: Xid (PCI:0000:3b:00): 79, pid=41523, name=python, GPU has fallen off the bus.", "xid"),
    (
        "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 clients joined.",
        "store-clients-timeout",
    ),
    (
        "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect to "
        "(10.0.0.1, 29500).",
        "store-connect-timeout",
    ),
    ("RuntimeError: wait timeout after 30000ms, keys: /default_pg/0//cuda//0", "store-wait-timeout"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "store-wait-timeout"),
    (
        "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
        "CollectiveFingerPrint(SequenceNumber=4, OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float), but Rank 1 is "
        "running collective: CollectiveFingerPrint(SequenceNumber=4, OpType=BROADCAST, TensorShape=[5]).",
        "collective-mismatch",
    ),
    (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
        "[127.0.0.1]:62034",
        "gloo-peer-closed",
    ),
    (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection reset by peer "
        "[127.0.0.1]:11871",
        "gloo-peer-closed",
    ),
    (
        "RuntimeError: [/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 30000ms "
        "for recv operation to complete",
        "gloo-operation-timeout",
    ),
    ("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ", "torchrun-child-failed"),
    (
        "torch.distributed.elastic.multiprocessing.api.SignalException: Process 41523 got signal: 1",
        "torch-distributed-error",
    ),
    ("Fatal Python error: Segmentation fault", "segmentation-fault"),
    ("command.sh: line 3: 41523 Segmentation fault      (core dumped) python train.py", "segmentation-fault"),
    ("Killed", "process-killed"),
    ("command.sh: line 2: 41523 Killed                  python train.py", "process-killed"),
    ("  exitcode  : -9 (pid: 41523)", "process-killed"),
    (
        "W0821 10:15:01.123000 41500 torch/distributed/elastic/multiprocessing/api.py:900] Sending process 41524 closing "
        "signal SIGTERM",
        "process-terminated",
    ),
    ("bash: line 1: trian.py: command not found", "command-not-found"),
    ("ERROR: Script failed with exit code 1 after 12.3s", "script-failed"),
    ("composer.utils.object_store.object_store.ObjectStoreTransientError: timed out", "composer-error"),
    ("streaming.base.storage.download.DownloadError: s3://bucket/shard.00000.mds", "streaming-dataset-error"),
    ("[MLflow Logger][Warning] No new logs have been emitted for 300 seconds", "metrics-stalled"),
]

ORDINARY_LINES = [
    "epoch 1 step 100 loss 0.4312",
    "Loading checkpoint shards: 100%|██████████| 4/4 [00:03<00:00,  1.01it/s]",
    "INFO: the command not found in cache, building it",  # "command not found" in prose is no alert
    "Killed 3 stale workers before starting",
    "NCCL INFO Channel 00/02 :    0   1",
    "ERROR: Script failed with exit code 0 after 1.0s",
    "memory: 12.3 GiB allocated",
    "",
]


@pytest.mark.parametrize(("line", "expected"), REAL_LINES, ids=[expected for _, expected in REAL_LINES])
def test_a_real_line_matches_its_pattern(line: str, expected: str) -> None:
    found = match_line(line)
    assert found is not None, f"no pattern matched: {line!r}"
    assert found[0].id == expected


@pytest.mark.parametrize("line", ORDINARY_LINES)
def test_an_ordinary_line_matches_nothing(line: str) -> None:
    assert match_line(line) is None


def test_every_pattern_is_exercised_by_a_real_line() -> None:
    assert {pattern.id for pattern in PATTERNS} == {expected for _, expected in REAL_LINES}


def test_every_pattern_has_an_id_a_severity_and_a_hint() -> None:
    for pattern in PATTERNS:
        assert pattern.id == pattern.id.lower() and " " not in pattern.id
        assert pattern.severity in (log_patterns.FATAL, log_patterns.ERROR, log_patterns.WARNING)
        assert pattern.hint.endswith(".") and len(pattern.hint) > 30, pattern.id
        assert by_id(pattern.id) is pattern


def test_peer_loss_and_outside_stops_are_consequences() -> None:
    consequences = {pattern.id for pattern in PATTERNS if pattern.consequence}
    assert {
        "gloo-peer-closed",
        "nccl-watchdog-timeout",
        "nccl-remote-error",
        "process-terminated",
        "torchrun-child-failed",
        "script-failed",
    } <= consequences
    assert not consequences & {"cuda-oom", "host-oom-killer", "cuda-illegal-memory-access", "collective-mismatch"}


def test_scan_numbers_lines_from_start_and_strips_line_endings() -> None:
    lines = ["step 1\n", "RuntimeError: CUDA error: out of memory\r\n", "step 2\n", "Killed\n"]
    found = list(scan(lines, start=10))
    assert [(m.line_number, m.pattern.id, m.line) for m in found] == [
        (11, "cuda-oom", "RuntimeError: CUDA error: out of memory"),
        (13, "process-killed", "Killed"),
    ]


def test_an_xid_hint_names_the_code() -> None:
    (found,) = scan(["NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus."])
    assert found.hint.startswith("Xid 79: the GPU has fallen off the bus")
    (unknown,) = scan(["NVRM: Xid (PCI:0000:3b:00): 999, pid=1"])
    assert unknown.hint == by_id("xid").hint


def test_causes_first_puts_the_root_cause_before_peer_losses() -> None:
    peer = "RuntimeError: [pair.cc:534] Connection closed by peer [127.0.0.1]:62034"
    cause = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."
    summary = "ERROR: Script failed with exit code 1 after 3.0s"
    ordered = causes_first(list(scan([peer, summary, "Segmentation fault", cause])))
    assert [m.pattern.id for m in ordered] == ["cuda-oom", "segmentation-fault", "gloo-peer-closed", "script-failed"]


def test_the_module_imports_neither_the_engine_nor_the_workloads() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, databricks.air.log_patterns; "
            "print(sorted(m for m in sys.modules if m.startswith('databricks.air.')))",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    # The package's __init__ loads the version and the names of its variables, nothing else.
    assert (
        done.stdout.strip() == "['databricks.air._variables', 'databricks.air.log_patterns', 'databricks.air.version']"
    )
