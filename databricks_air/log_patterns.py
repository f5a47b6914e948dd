"""The fatal lines of distributed training output, and what to do about each.

A table of patterns (:data:`PATTERNS`), each with a stable id, a severity, whether it is usually a *consequence* of
another process's failure (a peer's "Connection closed by peer" after a rank died), and a hint; and a scanner over
lines that returns what matched, with line numbers. Shared by the workload command (``air logs`` ``ALERT`` events,
``air get``) and the hang report of ``@distributed``. Pure: no import of the engine or the workloads package.

Example::

    from databricks.air import log_patterns

    for found in log_patterns.scan(open("node_0.log", errors="replace")):
        print(f"line {found.line_number}: {found.pattern.id}: {found.hint}")

Matching is an unanchored search per line (case-sensitive: these are messages printed by torch, NCCL, CUDA, gloo,
the kernel and bash, always spelled the same). Where two patterns match a line, the first in the table wins: the
table lists the specific before the general (``nccl-system-error`` before ``torch-distributed-error``).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

__all__ = [
    "LogPattern",
    "LogMatch",
    "PATTERNS",
    "FATAL",
    "ERROR",
    "WARNING",
    "by_id",
    "match_line",
    "scan",
    "causes_first",
]

FATAL = "fatal"
"""The process, or the whole job, cannot go on: out of memory, a dead CUDA context, a collective that timed out."""
ERROR = "error"
"""A failure whose cause is usually in the lines around it (a native crash, a generic distributed error)."""
WARNING = "warning"
"""Not a failure yet, but often the first sign of one (metrics that stopped, for instance)."""

_SEVERITY_ORDER = {FATAL: 0, ERROR: 1, WARNING: 2}


@dataclasses.dataclass(frozen=True)
class LogPattern:
    """One kind of fatal line."""

    id: str
    """Stable identifier (``cuda-oom``), for machines: JSON events, MLflow tags, tests."""
    title: str
    """What happened, in a few words (``CUDA out of memory``)."""
    regex: "re.Pattern[str]"
    severity: str
    """:data:`FATAL`, :data:`ERROR` or :data:`WARNING`."""
    consequence: bool
    """True when the line usually follows another process's failure (a peer that died, a stop from outside):
    look for the root cause elsewhere first."""
    hint: str
    """What to do, in one or two sentences."""


@dataclasses.dataclass(frozen=True)
class LogMatch:
    """A line that matched a pattern."""

    pattern: LogPattern
    line_number: int
    """1-based, counted from the ``start`` given to :func:`scan`."""
    line: str
    """The line, without its line ending."""
    match: "re.Match[str]" = dataclasses.field(compare=False, repr=False)

    @property
    def hint(self) -> str:
        """The pattern's hint, made specific to the line where the line says more (an Xid code's meaning)."""
        if self.pattern.id == "xid":
            code = self.match.group("code")
            meaning = XID_MEANINGS.get(int(code)) if code else None
            if meaning:
                return f"Xid {code}: {meaning}. {self.pattern.hint}"
        return self.pattern.hint


# Xid codes users meet, from NVIDIA's Xid catalog (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html).
XID_MEANINGS: Dict[int, str] = {
    13: "graphics engine exception, mostly an application fault (an out-of-range access)",
    31: "GPU memory page fault, mostly an application fault",
    43: "GPU stopped processing, mostly an application fault",
    45: "preemptive cleanup after an earlier error",
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "the GPU has fallen off the bus (reboot the node; RMA if it repeats)",
    92: "high single-bit ECC error rate",
    94: "contained ECC error (reset the GPU)",
    95: "uncontained ECC error (reset the GPU)",
    119: "GSP RPC timeout",
    120: "GSP error",
}


def _pattern(id: str, title: str, regex: str, severity: str, hint: str, consequence: bool = False) -> LogPattern:
    return LogPattern(id, title, re.compile(regex), severity, consequence, hint)


PATTERNS: Tuple[LogPattern, ...] = (
    # --- memory ---------------------------------------------------------------------------------------------------
    _pattern(
        "cuda-oom",
        "CUDA out of memory",
        r"CUDA out of memory|CUDA error: out of memory|\bOutOfMemoryError\b|CUBLAS_STATUS_ALLOC_FAILED",
        FATAL,
        "Use a smaller batch, sequence length or model shard (activation checkpointing, FSDP). With much memory "
        "'reserved but unallocated', try PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True. 'Process N has ... in "
        "use' means another process holds the GPU: a wrong device mapping, a stale rank, or a notebook's CUDA "
        "context.",
    ),
    _pattern(
        "host-oom-killer",
        "the kernel's OOM killer ended a process",
        r"Out of memory: Kill(ed)? process|\binvoked oom-killer\b|\boom-kill:|Memory cgroup out of memory",
        FATAL,
        "The machine ran out of host memory: use fewer DataLoader workers, smaller prefetch or shuffle buffers, or "
        "load less into RAM per rank.",
    ),
    _pattern(
        "host-alloc-failed",
        "host memory allocation failed",
        r"DefaultCPUAllocator: (can't allocate memory|not enough memory)|std::bad_alloc|\bMemoryError\b",
        FATAL,
        "A process could not allocate host memory: load less per rank, or use fewer ranks or workers on this machine.",
    ),
    # --- NCCL -----------------------------------------------------------------------------------------------------
    _pattern(
        "nccl-watchdog-timeout",
        "NCCL collective timed out (watchdog)",
        r"Watchdog caught collective operation timeout",
        FATAL,
        "Some rank never joined this collective (compare SeqNum across ranks): the rank printing this is a victim. "
        "Find the rank that failed or stalled first; raise the process group timeout only for phases that are "
        "legitimately long.",
        consequence=True,
    ),
    _pattern(
        "nccl-operations-failed",
        "NCCL operations failed or timed out",
        r"Some NCCL operations have failed or timed out",
        FATAL,
        "A follow-up of an NCCL failure or timeout reported above: the process is being torn down. Look for the "
        "first failing rank.",
        consequence=True,
    ),
    _pattern(
        "nccl-watchdog-stuck",
        "the NCCL watchdog got stuck",
        r"ProcessGroupNCCL's watchdog got stuck",
        FATAL,
        "A CUDA or NCCL call hangs, or the GIL is deadlocked inside a CUDA API: take native stacks "
        "(py-spy dump --native --pid PID) of the stuck rank.",
    ),
    _pattern(
        "nccl-system-error",
        "NCCL unhandled system error",
        r"unhandled system error|ncclSystemError",
        FATAL,
        "Often /dev/shm is too small ('Error while creating shared memory segment'): give the container "
        "--shm-size or --ipc=host. Rerun with NCCL_DEBUG=INFO for the failing call.",
    ),
    _pattern(
        "nccl-cuda-error",
        "NCCL unhandled CUDA error",
        r"unhandled cuda error|ncclUnhandledCudaError",
        FATAL,
        "A CUDA call inside NCCL failed: the CUDA error is usually printed just before. Rerun with "
        "CUDA_LAUNCH_BLOCKING=1 and NCCL_DEBUG=INFO.",
    ),
    _pattern(
        "nccl-remote-error",
        "NCCL remote error (a peer died or the network failed)",
        r"ncclRemoteError|remote process exit(ed|ing)",
        FATAL,
        "A peer process died or the network failed: find the first failing rank or node.",
        consequence=True,
    ),
    _pattern(
        "nccl-transport-error",
        "NCCL network or InfiniBand failure",
        r"NCCL WARN.*(Conn|Net|NET|IB\b|[Tt]imeout|unhandled)|Got async error event|net_ib\.cc:\d+ NCCL WARN",
        FATAL,
        "The transport between GPUs failed: check NCCL_SOCKET_IFNAME / NCCL_IB_HCA and the fabric; rerun with "
        "NCCL_DEBUG=INFO.",
    ),
    # --- CUDA and the GPU -----------------------------------------------------------------------------------------
    _pattern(
        "cuda-illegal-memory-access",
        "CUDA illegal memory access or kernel fault",
        r"an illegal memory access was encountered|unspecified launch failure|device-side assert triggered",
        FATAL,
        "CUDA reports kernel faults asynchronously, so the traceback may point elsewhere: rerun with "
        "CUDA_LAUNCH_BLOCKING=1 (and TORCH_USE_CUDA_DSA=1 for asserts). The CUDA context is dead: the process must "
        "restart.",
    ),
    _pattern(
        "gpu-ecc-error",
        "uncorrectable GPU memory (ECC) error",
        r"uncorrectable ECC error",
        FATAL,
        "A hardware fault: tell the machine's administrator and avoid that GPU; retry elsewhere.",
    ),
    _pattern(
        "xid",
        "NVIDIA driver Xid event",
        r"NVRM: Xid \([^)]*\): (?P<code>\d+)",
        FATAL,
        "Xid events come from the driver (kernel log): 13/31/43 are mostly application faults; 48, 63/64, 79, "
        "94/95 are hardware (tell the administrator and avoid that GPU).",
    ),
    _pattern(
        "cuda-error",
        "CUDA error",
        r"CUDA (runtime )?error|CUDA kernel errors might be asynchronously reported|cudaError\w+",
        FATAL,
        "Rerun with CUDA_LAUNCH_BLOCKING=1 so the error is reported where it happens.",
    ),
    # --- rendezvous and collectives (torch.distributed, gloo) -----------------------------------------------------
    _pattern(
        "store-clients-timeout",
        "ranks never joined the rendezvous store",
        r"Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined",
        FATAL,
        "A rank never started, or died before init_process_group: look at the ranks that are missing.",
    ),
    _pattern(
        "store-connect-timeout",
        "could not reach the rendezvous store",
        r"The client socket has timed out after .* while trying to connect to",
        FATAL,
        "MASTER_ADDR or MASTER_PORT is wrong, unreachable, or blocked, or rank 0 never started.",
    ),
    _pattern(
        "store-wait-timeout",
        "a store barrier timed out",
        r"wait timeout after \d+ ?ms, keys:|RendezvousTimeoutError|[Rr]endezvous.* timed out|TCPStore.* timed out",
        FATAL,
        "Some rank never reached this barrier (or rendezvous): it failed, hangs, or never started.",
    ),
    _pattern(
        "collective-mismatch",
        "ranks ran different collectives",
        r"Detected mismatch between collectives on ranks",
        FATAL,
        "Ranks issued different collectives, or the same one with different shapes: usually a data-dependent "
        "branch or an uneven number of batches. TORCH_DISTRIBUTED_DEBUG=DETAIL names the operations.",
    ),
    _pattern(
        "gloo-peer-closed",
        "a peer closed its connection",
        r"Connection (closed|reset) by peer",
        ERROR,
        "A consequence: another rank exited first (failed, or was stopped). Look for that rank's own error.",
        consequence=True,
    ),
    _pattern(
        "gloo-operation-timeout",
        "a gloo collective timed out",
        r"Timed out waiting \d+ ?ms for (recv|send) operation to complete",
        FATAL,
        "This rank waited in a collective that another rank never joined: find the rank that failed or is stuck.",
        consequence=True,
    ),
    _pattern(
        "torchrun-child-failed",
        "torchrun reports a failed worker",
        r"\bChildFailedError\b",
        ERROR,
        "torchrun's summary of a failed worker: the worker's own error is earlier in the output (its 'Root Cause' "
        "entry names the rank and the exit code).",
        consequence=True,
    ),
    _pattern(
        "torch-distributed-error",
        "torch.distributed error",
        r"torch\.distributed\.[\w.]*(Error|Exception)\b|\bDist(Backend|Network|Store)Error\b",
        ERROR,
        "A distributed runtime error: read the first failing rank's output.",
    ),
    # --- processes ------------------------------------------------------------------------------------------------
    _pattern(
        "segmentation-fault",
        "a process crashed in native code",
        r"Segmentation fault|SIGSEGV|Fatal Python error: (Segmentation fault|Aborted)|\bcore dumped\b",
        ERROR,
        "A native crash: often an extension built for another torch, CUDA or driver version; reinstall it for this "
        "environment.",
    ),
    _pattern(
        "process-killed",
        "a process was killed (SIGKILL)",
        r"^\s*Killed\s*$|: line \d+: +\d+ Killed\b|\bSignal 9 \(SIGKILL\)|exitcode\s*:\s*-9\b",
        ERROR,
        "SIGKILL is most often the kernel's OOM killer (see dmesg, and host memory), else a timeout or a cancel.",
    ),
    _pattern(
        "process-terminated",
        "a process was stopped (SIGTERM)",
        r"\bSignal 15 \(SIGTERM\)|closing signal SIGTERM|exitcode\s*:\s*-15\b",
        ERROR,
        "Stopped from outside: a timeout, a cancel, or the launcher stopping the others after one rank failed.",
        consequence=True,
    ),
    _pattern(
        "command-not-found",
        "command not found",
        r": command not found\s*$",
        ERROR,
        "Exit status 127: the program is not on PATH. A missing dependency (add it to environment.dependencies) "
        "or a typo in the command.",
    ),
    _pattern(
        "script-failed",
        "the command failed",
        r"ERROR: Script failed with exit code [1-9]\d* after",
        ERROR,
        "The lines before this one say why the command failed.",
        consequence=True,
    ),
    # --- frameworks -----------------------------------------------------------------------------------------------
    _pattern(
        "composer-error",
        "Composer or llm-foundry error",
        r"\bcomposer\.[\w.]*(Error|OutOfMemory)\b",
        ERROR,
        "A Composer failure: its message and the traceback above say which component failed.",
    ),
    _pattern(
        "streaming-dataset-error",
        "streaming dataset error",
        r"\bstreaming\.base\.[\w.]*(Error|Exception)\b",
        ERROR,
        "The streaming dataset could not read its data: check the remote path and credentials.",
    ),
    _pattern(
        "metrics-stalled",
        "no metrics for a while",
        r"\[MLflow Logger\]\[Warning\] No new logs have been emitted",
        WARNING,
        "Training may hang: no metric was logged for a while. Take stacks of the ranks (py-spy dump --pid PID).",
    ),
)

_BY_ID: Dict[str, LogPattern] = {pattern.id: pattern for pattern in PATTERNS}
assert len(_BY_ID) == len(PATTERNS), "pattern ids must be unique"

# One search per line finds whether any pattern matches; only then is the table walked to find the first one.
_ANY = re.compile("|".join(f"(?:{pattern.regex.pattern})" for pattern in PATTERNS))


def by_id(pattern_id: str) -> LogPattern:
    """The pattern with this id (``KeyError`` for an unknown one)."""
    return _BY_ID[pattern_id]


def match_line(line: str) -> Optional[Tuple[LogPattern, "re.Match[str]"]]:
    """The first pattern of the table that matches ``line``, with its match; ``None`` for an ordinary line."""
    if _ANY.search(line) is None:
        return None
    for pattern in PATTERNS:
        found = pattern.regex.search(line)
        if found is not None:
            return pattern, found
    return None  # pragma: no cover - _ANY matched, so one of the patterns does


def scan(lines: Iterable[str], start: int = 1) -> Iterator[LogMatch]:
    """Every line of ``lines`` that matches a pattern, in order; ``start`` is the number of the first line.

    ``lines`` may be a file, a list, or text split with ``splitlines()``; line endings are stripped.
    """
    for number, line in enumerate(lines, start):
        line = line.rstrip("\r\n")
        found = match_line(line)
        if found is not None:
            yield LogMatch(found[0], number, line, found[1])


def causes_first(matches: Sequence[LogMatch]) -> List[LogMatch]:
    """The matches with likely root causes first: not-consequences before consequences, then by severity, then
    in their original order (for one process's output, the first fatal line is usually the cause)."""
    return sorted(matches, key=lambda m: (m.pattern.consequence, _SEVERITY_ORDER[m.pattern.severity]))
