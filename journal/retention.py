"""What the journal keeps: the governed retention policy (the manifest's ``retention``) applied to
snapshots and segments, and the archive that retired segments may go to.

Snapshots: the last ``keep_last``, the pinned ones (rollback points), and every ``keep_every``-th
ever taken while it is within ``keep_ticks`` of the newest (0: for ever). Segments: a closed
segment whose records all lie before the oldest kept snapshot (and before where the audit
projection stands) is needed by no restart, replay or projection; the policy keeps it, archives
it or deletes it.

An archive is a journal directory of its own: ``records/`` holds the retired segments, each
zstd-compressed whole (``seg-….gjl.zst``), ``snapshots/`` the snapshots retention dropped for age
(a store with its catalog), and ``index.jsonl`` one line per archived segment (its range, the
hash of its last header, the sha256 of the archived file). A segment is archived only when its
chain is sound and continues the archive's last segment where the archive holds the one before
it; the archived file is read back and compared, and the original is removed only once the
retirement's receipt is signed (a failure in between leaves both, and the next round goes on). A
``JournalReader`` over the archive's ``records/`` reads the archived segments, and
``python -m engine.core.verify --journal-dir <archive>`` replays any range between its snapshots.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import zstandard

from .reader import JournalReader
from .segments import COMPRESSED, read_segment, segments

__all__ = ["Archive", "ArchiveRefused", "Archived", "Policy", "Segment", "describe", "remove", "retirable", "segments"]
from .snapshots import SnapshotMeta, SnapshotStore, write_atomic

SegmentPolicy = Literal["keep", "archive", "delete"]
INDEX = "index.jsonl"


@dataclass(frozen=True)
class Policy:
    keep_last: int = 10
    keep_every: int = 60
    keep_ticks: int = 1_296_000  # six hours of world at 60 ticks/s; 0: keep_every's snapshots for ever
    segments: SegmentPolicy = "archive"

    def describe(self) -> str:
        age = f"for {self.keep_ticks:,} ticks" if self.keep_ticks else "for ever"
        return f"snapshots: the last {self.keep_last}, every {self.keep_every}th {age}; older segments: {self.segments}"


@dataclass(frozen=True)
class Segment:
    first_seq: int
    last_seq: int
    path: Path


def retirable(records_dir: Path, before_seq: int) -> list[Segment]:
    """The closed segments whose records all come before record ``before_seq``, oldest first
    (the last segment, being written, never)."""
    segs = segments(records_dir)
    out = []
    for (first, path), (next_first, _) in itertools.pairwise(segs):
        if next_first <= before_seq:
            out.append(Segment(first, next_first - 1, path))
    return out


class ArchiveRefused(Exception):
    """A segment that may not be archived (its chain is broken, or does not continue the archive)."""


@dataclass(frozen=True)
class Archived:
    name: str
    first_seq: int
    last_seq: int
    first_tick: int
    last_tick: int
    last_hash: str  # hex of the last record's header hash: the next segment's first parent
    bytes: int  # the segment's own size
    archived_bytes: int
    sha256: str  # of the archived (compressed) file

    def to_data(self) -> dict[str, Any]:
        return asdict(self)


class Archive:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.records = self.directory / "records"
        self.snapshots = SnapshotStore(self.directory / "snapshots")

    def entries(self) -> list[Archived]:
        try:
            lines = (self.directory / INDEX).read_text().splitlines()
        except FileNotFoundError:
            return []
        return [Archived(**json.loads(line)) for line in lines if line.strip()]

    def add_segment(self, segment: Segment) -> Archived:
        """Archive a copy of one retired segment: its chain checked (and its link to the archive's
        segment before it), compressed, written, read back and compared. The original stays until
        :func:`remove` (once its receipt is signed); a segment archived already is not again."""
        original = segment.path.read_bytes()
        done = next((e for e in self.entries() if e.first_seq == segment.first_seq), None)
        if done is not None and done.last_seq == segment.last_seq and self._reads_back(done, original):
            return done
        check = JournalReader(segment.path.parent).verify_chain(segment.first_seq, segment.last_seq)
        if not check.ok or check.head is None or check.head.seq != segment.last_seq:
            raise ArchiveRefused(f"{segment.path.name}: its chain is not sound ({check.reason or 'records missing'})")
        first = next(JournalReader(segment.path.parent).headers(segment.first_seq, segment.first_seq))
        before = next((e for e in reversed(self.entries()) if e.last_seq == segment.first_seq - 1), None)
        if before is not None and first.parent_hash.hex() != before.last_hash:
            raise ArchiveRefused(
                f"{segment.path.name}: its first record does not follow the archive's record {before.last_seq}"
            )
        compressed = zstandard.ZstdCompressor(level=3, write_checksum=True).compress(original)
        self.records.mkdir(parents=True, exist_ok=True)
        target = self.records / (segment.path.name + COMPRESSED)
        write_atomic(target, compressed)
        if read_segment(target) != original:
            target.unlink()
            raise ArchiveRefused(f"{segment.path.name}: the archived copy does not read back the same")
        entry = Archived(
            name=target.name,
            first_seq=segment.first_seq,
            last_seq=segment.last_seq,
            first_tick=first.tick,
            last_tick=check.head.tick,
            last_hash=check.head.hash().hex(),
            bytes=len(original),
            archived_bytes=len(compressed),
            sha256=hashlib.sha256(compressed).hexdigest(),
        )
        with open(self.directory / INDEX, "a") as f:
            f.write(json.dumps(entry.to_data(), sort_keys=True) + "\n")
            f.flush()
            os.fsync(f.fileno())
        return entry

    def _reads_back(self, entry: Archived, original: bytes) -> bool:
        target = self.records / entry.name
        try:
            return hashlib.sha256(target.read_bytes()).hexdigest() == entry.sha256 and read_segment(target) == original
        except (OSError, zstandard.ZstdError):
            return False

    def adopt_snapshot(self, store: SnapshotStore, meta: SnapshotMeta) -> None:
        """Copy a snapshot retention drops for age into the archive's store (its file as it is)."""
        self.snapshots.adopt(meta, store.directory / meta.name)

    def usage(self) -> dict[str, Any]:
        entries = self.entries()
        return {
            "segments": len(entries),
            "bytes": directory_bytes(self.directory),
            "first_seq": entries[0].first_seq if entries else None,
            "last_seq": entries[-1].last_seq if entries else None,
            "first_tick": entries[0].first_tick if entries else None,
            "snapshots": len(self.snapshots.kept()),
        }


def describe(segment: Segment) -> Archived:
    """What a segment about to be deleted holds, for its receipt."""
    reader = JournalReader(segment.path.parent)
    headers = list(reader.headers(segment.first_seq, segment.last_seq))
    data = segment.path.read_bytes()
    return Archived(
        name=segment.path.name,
        first_seq=segment.first_seq,
        last_seq=segment.last_seq,
        first_tick=headers[0].tick if headers else 0,
        last_tick=headers[-1].tick if headers else 0,
        last_hash=headers[-1].hash().hex() if headers else "",
        bytes=len(data),
        archived_bytes=0,
        sha256=hashlib.sha256(data).hexdigest(),
    )


def remove(segment: Segment) -> None:
    """The retired segment leaves the journal (archived and receipted, or receipted for deletion)."""
    segment.path.unlink(missing_ok=True)


def directory_bytes(directory: Path) -> int:
    if not directory.is_dir():
        return 0
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())


def disk(directory: Path) -> dict[str, int]:
    usage = shutil.disk_usage(directory if directory.exists() else directory.parent)
    return {"total_bytes": usage.total, "free_bytes": usage.free}
