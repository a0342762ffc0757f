"""Reading a journal: records in order, each checked against the chain (sequence, parent hash,
inputs hash) and its frame (length, CRC, flags, compression). Readers never lock: they run beside
the live engine, and a torn tail of the last segment (a record being written) ends a walk quietly."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .framing import Walk, frames
from .record import ZERO_HASH, Header, JournalCorrupt, JournalRecord, decode_record
from .segments import read_segment, segments, walk_end


@dataclass
class ChainCheck:
    ok: bool
    checked: int  # records checked and found sound, from ``from_seq`` on
    first_bad_seq: int | None = None  # the record that should be where the chain breaks
    reason: str | None = None
    head: Header | None = None  # the last sound record
    torn_tail: bool = False  # the last segment ends in a torn tail (a record being written, or lost)


@dataclass(frozen=True)
class Position:
    """Where a walk stands: the next record's sequence number, the segment it is in (its first
    sequence number) and the byte it starts at, and the header before it."""

    seq: int
    segment: int
    offset: int
    prev: Header


def archived_records(archive_dir: Path | None) -> Path | None:
    """The ``records/`` of a journal's archive (journal/retention.py), if it has any."""
    records = Path(archive_dir) / "records" if archive_dir is not None else None
    return records if records is not None and records.is_dir() else None


class JournalReader:
    def __init__(self, directory: Path, archive: Path | None = None) -> None:
        """The journal's segments in ``directory``; with ``archive`` (an archive's ``records/``,
        journal/retention.py), those it holds before them too, read as one journal."""
        self.directory = Path(directory)
        self.archive = Path(archive) if archive is not None else None
        self.torn_tail = False  # the last walk ended at a torn tail

    def segments(self) -> list[tuple[int, Path]]:
        live = segments(self.directory)
        if self.archive is None:
            return live
        starts = {first for first, _ in live}
        return sorted([*(s for s in segments(self.archive) if s[0] not in starts), *live])

    def records(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[JournalRecord]:
        """The records ``from_seq`` through ``to_seq`` (None: to the end), lazily. The chain is
        checked from the first record of the segment holding ``from_seq`` (that record's parent
        is trusted; from 0, the first record's parent must be the zero hash). JournalCorrupt
        names the first record that breaks it: the one that should be where the break is."""
        from_seq = max(from_seq, 0)
        if to_seq is not None and to_seq < from_seq:
            return
        for record, _ in self.walk(from_seq):
            if record.header.seq >= from_seq:
                yield record
            if to_seq is not None and record.header.seq >= to_seq:
                return

    def walk(self, from_seq: int, resume: Position | None = None) -> Iterator[tuple[JournalRecord, Position]]:
        """Every record from the start of the segment holding ``from_seq``, or from ``resume`` (where
        an earlier walk stood, its last header trusted), each with the position after it."""
        self.torn_tail = False
        segs = self.segments()
        if not segs:
            return
        if resume is None:
            i = max((i for i, (first, _) in enumerate(segs) if first <= from_seq), default=0)
            if segs[i][0] > from_seq:
                first, path = segs[i]
                raise JournalCorrupt(
                    from_seq, f"record {from_seq} is missing (the first segment, {path.name}, starts at {first})"
                )
            expected, offset, prev = segs[i][0], 0, None
        else:
            i = next((i for i, (first, _) in enumerate(segs) if first == resume.segment), -1)
            if i < 0:
                raise JournalCorrupt(resume.seq, f"the segment starting at record {resume.segment} is gone")
            expected, offset, prev = resume.seq, resume.offset, resume.prev
        while i < len(segs):
            first, path = segs[i]
            if offset == 0 and first > expected:
                raise JournalCorrupt(
                    expected, f"record {expected} is missing (the next segment, {path.name}, starts at {first})"
                )
            if offset == 0 and first < expected:
                raise JournalCorrupt(expected, f"segment {path.name} starts at record {first}, expected {expected}")
            data = read_segment(path, offset)
            walk = Walk()
            for fr in frames(data, walk):
                record = decode_record(fr.payload, expected)
                h = record.header
                if h.seq > expected:
                    raise JournalCorrupt(expected, f"record {expected} is missing (found {h.seq})")
                if h.seq < expected:
                    raise JournalCorrupt(expected, f"expected {expected}, found {h.seq} again")
                if prev is not None and h.parent_hash != prev.hash():
                    raise JournalCorrupt(h.seq, f"its parent hash does not match record {prev.seq}'s header")
                if prev is None and h.seq == 0 and h.parent_hash != ZERO_HASH:
                    raise JournalCorrupt(0, "the first record's parent hash is not the zero hash")
                prev = h
                expected += 1
                yield record, Position(expected, first, offset + fr.end, prev)
            end = walk_end(data, walk)
            if end.torn_at is not None and i == len(segs) - 1:
                self.torn_tail = True
                return
            if end.torn_at is not None or end.damage is not None:
                where = f"{path.name}" + (f" (read from byte {offset})" if offset else "")
                raise JournalCorrupt(expected, f"{where}: {end.damage or f'a torn frame at byte {end.torn_at}'}")
            i, offset = i + 1, 0

    def headers(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[Header]:
        """The headers of :meth:`records` (each record read and checked whole)."""
        for record in self.records(from_seq, to_seq):
            yield record.header

    def head(self) -> Header | None:
        """The last record's header (reading the last segment that holds one)."""
        for first, _ in reversed(self.segments()):
            last = None
            for header in self.headers(from_seq=first):
                last = header
            if last is not None:
                return last
        return None

    def verify_chain(self, from_seq: int = 0, to_seq: int | None = None) -> ChainCheck:
        """Check records ``from_seq`` through ``to_seq`` (None: to the end); never raises for a
        damaged journal, it says where and why."""
        checked = 0
        head: Header | None = None
        try:
            for header in self.headers(from_seq, to_seq):
                checked += 1
                head = header
        except JournalCorrupt as exc:
            return ChainCheck(False, checked, exc.seq, exc.reason, head, self.torn_tail)
        return ChainCheck(True, checked, None, None, head, self.torn_tail)


class JournalTail:
    """The journal's records as it grows, for a reader that comes back for more (the audit
    projection, about once a second beside the live engine): each :meth:`read` goes on from
    where the last stopped rather than walking its segment from the start (near a segment's end,
    thousands of records each time). The chain is checked across reads."""

    def __init__(self, directory: Path, from_seq: int = 0, archive: Path | None = None) -> None:
        """``archive``: an archive's ``records/``, read before the journal's own segments."""
        self.directory = Path(directory)
        self.archive = archive
        self.next_seq = max(from_seq, 0)
        self._position: Position | None = None

    def seek(self, seq: int) -> None:
        """Go on from record ``seq`` (found again from the start of its segment)."""
        if seq != self.next_seq:
            self.next_seq, self._position = max(seq, 0), None

    def read(self, max_records: int) -> list[JournalRecord]:
        """Up to ``max_records`` records from :attr:`next_seq` on (fewer at the journal's end)."""
        out: list[JournalRecord] = []
        if max_records <= 0:
            return out
        reader = JournalReader(self.directory, self.archive)
        if self._position is not None and self._position.segment not in {first for first, _ in reader.segments()}:
            self._position = None  # its segment retired (journal/retention.py): found again from next_seq
        for record, position in reader.walk(self.next_seq, self._position):
            if record.header.seq < self.next_seq:  # before it, in its segment: checked, not returned
                self._position = position
                continue
            out.append(record)
            self._position, self.next_seq = position, position.seq
            if len(out) >= max_records:
                break
        return out
