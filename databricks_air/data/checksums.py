"""Per-file checksums of a checkpoint: CRC-32 of every 4 MiB block, computed while writing, checked while reading.

Block checksums rather than one per file let a load check exactly the bytes it reads (a partial load reads part
of a file) without holding a whole file in memory. The checksums of a checkpoint live in a manifest,
``.checksums.json``, written before the ``.metadata`` commit marker, so that a checkpoint with a commit marker
always has its manifest. A checkpoint written by torch's own ``FileSystemWriter`` has no manifest and is read
without checks.

Hashing runs on a helper thread while the same bytes are written or read (CRC-32 and file I/O both release the
GIL), so checking costs little time on top of the I/O. The CRC-32 is zlib's, computed by ISA-L where it is
installed (:mod:`~databricks.air.data.crc`), which keeps a load within reach of torch's reader, which checks nothing.
"""

from __future__ import annotations

import io
import json
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Set, Tuple

from databricks.air.data.errors import CorruptCheckpointError

from databricks.air.data.crc import combine, crc32

BLOCK_SIZE = 4 * 1024 * 1024
MANIFEST_VERSION = 1
_OVERLAP_BYTES = 1024 * 1024  # below this, hashing inline is cheaper than handing it to a thread
_PIECE_BYTES = 64 * 1024  # shorter reads of part of a block are not kept: reading them again costs less

_helpers: Optional[ThreadPoolExecutor] = None
_helpers_pid = -1
_helpers_lock = threading.Lock()


def _helper() -> ThreadPoolExecutor:
    global _helpers, _helpers_pid
    with _helpers_lock:
        # A forked child inherits the pool object but none of its threads: it needs a pool of its own.
        if _helpers is None or _helpers_pid != os.getpid():
            _helpers = ThreadPoolExecutor(max_workers=4, thread_name_prefix="air-checksum")
            _helpers_pid = os.getpid()
        return _helpers


class BlockChecksums:
    """CRC-32 of each ``block_size`` block of a byte stream, fed in order."""

    def __init__(self, block_size: int = BLOCK_SIZE) -> None:
        self.block_size = block_size
        self.size = 0
        self.blocks: List[int] = []
        self._current = 0
        self._filled = 0

    def update(self, data: memoryview) -> None:
        """Hash ``data``, the next bytes of the stream, here."""
        self.finish_update(self.start_update(data, None))

    def start_update(self, data: memoryview, pool: Optional[ThreadPoolExecutor]) -> List[Any]:
        """Hash ``data``: the partial blocks here, the whole ones on ``pool`` (each block's CRC is independent).

        Returns what :meth:`finish_update` needs to complete the update; nothing else may be hashed in between.
        """
        size, block_size = len(data), self.block_size
        offset = 0
        pending: List[Any] = []
        if self._filled:
            take = min(block_size - self._filled, size)
            self._current = crc32(data[:take], self._current)
            self._filled += take
            offset = take
            if self._filled == block_size:
                pending.append(self._current)
                self._current, self._filled = 0, 0
        while size - offset >= block_size:
            block = data[offset : offset + block_size]
            pending.append(pool.submit(crc32, block) if pool is not None else crc32(block))
            offset += block_size
        if offset < size:
            self._current = crc32(data[offset:], self._current)
            self._filled += size - offset
        self.size += size
        return pending

    def finish_update(self, pending: List[Any]) -> None:
        self.blocks.extend(item.result() if isinstance(item, Future) else item for item in pending)

    def record(self) -> Dict[str, Any]:
        blocks = list(self.blocks)
        if self._filled:
            blocks.append(self._current)
        return {"size": self.size, "block_size": self.block_size, "crc32": blocks}


class ChecksummingStream(io.RawIOBase):
    """A write-only file that hashes what passes through it; ``on_close`` receives the checksum record."""

    def __init__(self, raw: Any, on_close: Any) -> None:
        super().__init__()
        self._raw = raw
        self._sums = BlockChecksums()
        self._position = 0
        self._on_close = on_close

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data).cast("B")
        if len(view) >= _OVERLAP_BYTES:
            # Whole blocks are hashed on helper threads while this thread writes the same bytes.
            pending = self._sums.start_update(view, _helper())
            try:
                self._raw.write(view)
            finally:
                self._sums.finish_update(pending)
        else:
            self._sums.update(view)
            self._raw.write(view)
        self._position += len(view)
        return len(view)

    def tell(self) -> int:
        return self._position

    def fileno(self) -> int:
        return self._raw.fileno()

    def flush(self) -> None:
        self._raw.flush()

    def close(self) -> None:
        if self.closed:
            return
        super().close()  # flushes first
        self._raw.close()
        self._on_close(self._sums.record())


class FileVerifier:
    """Checks the blocks of one checkpoint file that a load reads, each block once.

    A block that one read covers entirely is checked from the bytes just read (:meth:`absorb`), on a helper thread
    while the next bytes are read. A block that reads cover in pieces (a tensor's bytes rarely start at a block
    boundary) keeps the CRC of each large piece; :meth:`verify` reads again only what lies between the pieces and
    checks the block from the pieces' CRCs joined (:func:`~databricks.air.data.crc.combine`).
    """

    def __init__(self, path: str, record: Dict[str, Any]) -> None:
        self.path = path
        self.record = record
        self._verified: Set[int] = set()
        self._pieces: Dict[int, Dict[int, Tuple[int, "Future[int]"]]] = {}  # block -> {start: (end, CRC)}
        self._lock = threading.Lock()

    def check_size(self) -> None:
        actual = os.stat(self.path).st_size
        if actual != self.record["size"]:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path} has {actual} bytes but {self.record['size']} were written (truncated "
                "or replaced). Load an earlier checkpoint, or save again.",
                path=self.path,
            )

    def block_end(self, offset: int) -> int:
        """Where the block holding the byte before ``offset`` ends (the file's end for its last block)."""
        block_size = self.record["block_size"]
        return min(-(-offset // block_size) * block_size, self.record["size"])

    def absorb(self, start: int, data: memoryview) -> List[Future]:
        """Start hashing what ``data`` (the file's bytes from ``start``) holds of each block; wait for the
        returned futures before ``data`` changes."""
        block_size, size = self.record["block_size"], self.record["size"]
        end = start + len(data)
        hashing: List[Future] = []
        block = start // block_size
        while block * block_size < end:
            begin = block * block_size
            block_end = min(begin + block_size, size)
            low, high = max(start, begin), min(end, block_end)
            if block not in self._verified and high > low:
                view = data[low - start : high - start]
                if low == begin and high == block_end:
                    hashing.append(_helper().submit(self._check_block, block, view))
                elif high - low >= _PIECE_BYTES:
                    piece = _helper().submit(crc32, view)
                    hashing.append(piece)
                    with self._lock:
                        pieces = self._pieces.setdefault(block, {})
                        if low not in pieces or pieces[low][0] < high:
                            pieces[low] = (high, piece)
            block += 1
        return hashing

    def verify(self, start: int, length: int) -> None:
        """Raise :class:`CorruptCheckpointError` if any block overlapping ``[start, start + length)`` is damaged."""
        if length <= 0:
            return
        block_size = self.record["block_size"]
        first, last = start // block_size, (start + length - 1) // block_size
        with self._lock:
            todo = [block for block in range(first, last + 1) if block not in self._verified]
        if not todo:
            return
        descriptor = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            for block in todo:
                self._check_from_pieces(block, descriptor)
        finally:
            os.close(descriptor)

    def _check_from_pieces(self, block: int, descriptor: int) -> None:
        """Check ``block`` from the pieces kept for it, reading the bytes between them."""
        block_size, size = self.record["block_size"], self.record["size"]
        begin = block * block_size
        end = begin + min(block_size, size - begin)
        with self._lock:
            pieces = self._pieces.pop(block, {})
        starts = sorted(pieces)
        cursor, crc = begin, 0
        while cursor < end:
            if cursor in pieces:
                piece_end, piece = pieces[cursor]
                crc = combine(crc, piece.result(), piece_end - cursor)
                cursor = piece_end
                continue
            gap_end = next((piece_start for piece_start in starts if piece_start > cursor), end)
            gap = os.pread(descriptor, gap_end - cursor, cursor)
            crc = crc32(gap, crc)
            if len(gap) < gap_end - cursor:
                break  # the file is shorter than it was: reported as a mismatch below
            cursor = gap_end
        self._compare(block, crc, cursor - begin)

    def _check_block(self, block: int, data: memoryview) -> None:
        self._compare(block, crc32(data), len(data))

    def _compare(self, block: int, crc: int, length: int) -> None:
        block_size, size = self.record["block_size"], self.record["size"]
        begin = block * block_size
        want = min(block_size, size - begin)
        if length != want or crc != self.record["crc32"][block]:
            raise CorruptCheckpointError(
                f"checkpoint file {self.path} is corrupted: bytes {begin}-{begin + want - 1} do not match the "
                "checksum recorded when it was saved. Load an earlier checkpoint, or save again.",
                path=self.path,
                offset=begin,
            )
        with self._lock:
            self._verified.add(block)


def write_manifest(path: str, save_id: str, files: Dict[str, Dict[str, Any]], sync: bool) -> None:
    """Write the manifest (``files``: checkpoint file name -> checksum record) to ``path``."""
    document = {"version": MANIFEST_VERSION, "algorithm": "crc32", "save_id": save_id, "files": files}
    with open(path, "w") as stream:
        json.dump(document, stream, separators=(",", ":"))
        stream.flush()
        if sync:
            os.fsync(stream.fileno())


def read_manifest(path: str) -> Optional[Dict[str, Any]]:
    """The manifest at ``path``, or ``None`` if there is none (a checkpoint written by torch itself)."""
    try:
        with open(path) as stream:
            document = json.load(stream)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as error:
        raise CorruptCheckpointError(f"checksum manifest {path} is unreadable: {error}", path=path) from error
    if not isinstance(document, dict) or document.get("version") != MANIFEST_VERSION:
        raise CorruptCheckpointError(f"checksum manifest {path} has an unknown format", path=path)
    return document
