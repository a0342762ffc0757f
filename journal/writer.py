"""Appending to a journal: one writer per directory (an exclusive lock), one ``os.write`` per
record (a killed process leaves either the whole frame or a torn tail, never a frame that reads
as whole), fsync batched in a background thread, a new segment every N records.

A write that fails part-way is undone (the file cut back to the last whole record) before the
error reaches the caller; when that is impossible, or an fsync failed (the kernel may have
dropped the data), the writer refuses every later append: the next open recovers from the files.

Opening recovers: the last segment's frames are read and checked; a torn tail (the record a
crash interrupted) is cut off and reported; anything else wrong is raised, never repaired."""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genesis import canonical

from .framing import Walk, frame, frames
from .reader import JournalReader
from .record import ZERO_HASH, Header, JournalCorrupt
from .segments import segment_name, segments, walk_end

log = logging.getLogger("genesis.journal")
_RECORD_HEAD = b"\xa2" + canonical.encode("h")  # a two-entry map; "h" sorts before "i"
_INPUTS_KEY = canonical.encode("i")


class JournalLocked(Exception):
    """Another process writes this journal."""


class JournalWriteFailed(Exception):
    """The writer can no longer append: an earlier write or fsync failed. The files hold every
    record appended before it (and at most a torn tail, cut off when the journal is next opened)."""


@dataclass
class RecoveryReport:
    truncated_bytes: int = 0
    head_seq: int | None = None


class JournalWriter:
    """Use :meth:`open`."""

    def __init__(
        self,
        directory: Path,
        *,
        segment_max_records: int = 3600,
        segment_max_bytes: int = 64 << 20,
        fsync_interval_s: float = 1.0,
    ) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.segment_max_records = segment_max_records
        self.segment_max_bytes = segment_max_bytes
        self.bytes_written = 0  # by this writer since it opened
        self.fsync_interval_s = fsync_interval_s
        self._lock_file = open(self.directory / "LOCK", "a+")  # noqa: SIM115 (held while open)
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read(32).strip()
            self._lock_file.close()
            who = f" (pid {holder})" if holder.isdigit() else ""
            raise JournalLocked(
                f"another process{who} is writing the journal in {self.directory}; one writer at a time"
            ) from None
        self._lock_file.truncate(0)
        self._lock_file.write(str(os.getpid()))
        self._lock_file.flush()
        self._fd: int | None = None
        self._failed: str | None = None  # why appending stopped
        self._dirty = threading.Event()
        self._closing = threading.Event()
        self._sync_lock = threading.Lock()
        self.head: Header | None = None
        try:
            self.head, self._segment_records, self._segment_bytes, self.recovery = self._recover()
        except BaseException:
            self._release()
            raise
        self._syncer: threading.Thread | None = None
        if fsync_interval_s > 0:
            self._syncer = threading.Thread(target=self._sync_loop, name="journal-fsync", daemon=True)
            self._syncer.start()

    @classmethod
    def open(cls, directory: Path, **options: Any) -> JournalWriter:
        """The journal in ``directory`` (created if need be), recovered, locked for this writer;
        ``options`` as for the constructor."""
        return cls(directory, **options)

    def _recover(self) -> tuple[Header | None, int, int, RecoveryReport]:
        segs = segments(self.directory)
        report = RecoveryReport()
        if not segs:
            return None, 0, 0, report
        first, path = segs[-1]
        data = path.read_bytes()
        walk = Walk()
        count = 0
        for _ in frames(data, walk):
            count += 1
        end = walk_end(data, walk)
        if end.damage is not None:
            raise JournalCorrupt(first + count, f"{path.name}: {end.damage}")
        if end.torn_at is not None:
            report.truncated_bytes = len(data) - end.torn_at
            with open(path, "r+b") as f:
                f.truncate(end.torn_at)
                f.flush()
                os.fsync(f.fileno())
            data = data[: end.torn_at]
        # the chain through the last segment, from the previous one's first record
        head = None
        start = segs[-2][0] if len(segs) > 1 else first
        for header in JournalReader(self.directory).headers(from_seq=start):
            head = header
        report.head_seq = head.seq if head is not None else None
        next_seq = head.seq + 1 if head is not None else 0
        if count == 0 and first != next_seq:
            raise JournalCorrupt(next_seq, f"the last segment, {path.name}, is empty and named for record {first}")
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        return head, count, len(data), report

    # -- appending -----------------------------------------------------------------------

    def append(self, kind: str, epoch: int, tick: int, inputs: dict[str, Any], state_hash: bytes) -> Header:
        """Append one record after the head; its header. Raises before anything is written when
        the record is not one a reader would accept (``Header.from_data``'s rules)."""
        if self._failed is not None:
            raise JournalWriteFailed(f"the journal in {self.directory} takes no more records: {self._failed}")
        if self._closing.is_set():
            raise RuntimeError("the journal is closed")
        if type(kind) is not str or not kind:
            raise ValueError("kind must be a non-empty str")
        if type(epoch) is not int or type(tick) is not int or epoch < 0 or tick < 0:
            raise ValueError("epoch and tick must be non-negative ints")
        if type(inputs) is not dict:
            raise ValueError("inputs must be a dict")
        if type(state_hash) is not bytes or len(state_hash) != 32:
            raise ValueError("state_hash must be 32 bytes")
        head = self.head
        encoded_inputs = canonical.encode(inputs)
        header = Header(
            seq=head.seq + 1 if head is not None else 0,
            epoch=epoch,
            kind=kind,
            tick=tick,
            parent_hash=head.hash() if head is not None else ZERO_HASH,
            inputs_hash=hashlib.sha256(encoded_inputs).digest(),
            state_hash=state_hash,
        )
        payload = _RECORD_HEAD + canonical.encode(header.to_data()) + _INPUTS_KEY + encoded_inputs
        data = frame(payload)
        if (
            self._fd is None
            or self._segment_records >= self.segment_max_records
            or self._segment_bytes + len(data) > self.segment_max_bytes
        ):
            self._roll(header.seq)
        assert self._fd is not None
        self._write(data, header)
        if self.fsync_interval_s <= 0:
            self.sync()
        else:
            self._dirty.set()
        return header

    def _write(self, data: bytes, header: Header) -> None:
        """One write of the whole frame; the head moves only when all of it is in the file. A
        write cut short, or interrupted by an exception after the kernel took some of it, is cut
        back to the last whole record before the error goes on."""
        fd = self._fd
        assert fd is not None
        try:
            written = os.write(fd, data)
        except BaseException:
            self._settle(fd, data, header)
            raise
        if written != len(data):
            self._settle(fd, data, header)
            raise JournalWriteFailed(f"wrote {written} of the {len(data)} bytes of record {header.seq}")
        self._advance(data, header)

    def _advance(self, data: bytes, header: Header) -> None:
        self._segment_records += 1
        self._segment_bytes += len(data)
        self.bytes_written += len(data)
        self.head = header

    def _settle(self, fd: int, data: bytes, header: Header) -> None:
        """After a failed write: whether the frame is in the file whole (the head moves on),
        not at all, or in part (cut off; if that fails, no more appends)."""
        before = self._segment_bytes
        try:
            size = os.fstat(fd).st_size
            if size == before + len(data):
                self._advance(data, header)
            elif size != before:
                os.ftruncate(fd, before)
        except OSError as exc:
            self._failed = f"record {header.seq} was written in part and could not be cut off ({exc})"

    def _roll(self, first_seq: int) -> None:
        """Finish the current segment (fsynced) and start the next at ``first_seq``."""
        with self._sync_lock:
            if self._fd is not None:
                self._fsync(self._fd)
                os.close(self._fd)
                self._fd = None
            path = self.directory / segment_name(first_seq)
            self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, 0o644)
            dir_fd = os.open(self.directory, os.O_RDONLY)
            try:
                self._fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._segment_records = 0
        self._segment_bytes = 0

    def sync(self) -> None:
        """fsync the current segment now. A failed fsync stops the writer: the kernel may have
        dropped the data it could not write, so later records could follow a hole."""
        with self._sync_lock:
            if self._fd is not None:
                self._fsync(self._fd)

    def _fsync(self, fd: int) -> None:
        try:
            os.fsync(fd)
        except OSError as exc:
            self._failed = f"fsync failed ({exc})"
            raise

    def _sync_loop(self) -> None:
        while not self._closing.is_set():
            self._closing.wait(self.fsync_interval_s)
            if self._dirty.is_set():
                self._dirty.clear()
                try:
                    self.sync()
                except OSError as exc:
                    log.error("journal: fsync failed, no more records are taken: %s", exc)

    def close(self) -> None:
        if self._closing.is_set():
            return
        self._closing.set()
        if self._syncer is not None:
            self._syncer.join(timeout=10)
        try:
            self.sync()
        finally:
            self._release()

    def _release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        fcntl.flock(self._lock_file, fcntl.LOCK_UN)
        self._lock_file.close()
