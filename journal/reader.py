"""Reading a journal: records in order, each checked against the chain (sequence, parent hash,
inputs hash) and its frame (length, CRC, flags, compression). Readers never lock: they run beside
the live engine, and a torn tail of the last segment (a record being written) ends a walk quietly."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .framing import Walk, frames
from .record import ZERO_HASH, Header, JournalCorrupt, JournalRecord, decode_record
from .segments import segments, walk_end


@dataclass
class ChainCheck:
    ok: bool
    checked: int  # records checked and found sound, from ``from_seq`` on
    first_bad_seq: int | None = None  # the record that should be where the chain breaks
    reason: str | None = None
    head: Header | None = None  # the last sound record
    torn_tail: bool = False  # the last segment ends in a torn tail (a record being written, or lost)


class JournalReader:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.torn_tail = False  # the last walk ended at a torn tail

    def records(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[JournalRecord]:
        """The records ``from_seq`` through ``to_seq`` (None: to the end), lazily. The chain is
        checked from the first record of the segment holding ``from_seq`` (that record's parent
        is trusted; from 0, the first record's parent must be the zero hash). JournalCorrupt
        names the first record that breaks it: the one that should be where the break is."""
        self.torn_tail = False
        from_seq = max(from_seq, 0)
        segs = segments(self.directory)
        if not segs or (to_seq is not None and to_seq < from_seq):
            return
        start = max((i for i, (first, _) in enumerate(segs) if first <= from_seq), default=0)
        if segs[start][0] > from_seq:
            first, path = segs[start]
            raise JournalCorrupt(
                from_seq, f"record {from_seq} is missing (the first segment, {path.name}, starts at {first})"
            )
        expected = segs[start][0]
        prev: Header | None = None
        for i in range(start, len(segs)):
            first, path = segs[i]
            if first > expected:
                raise JournalCorrupt(
                    expected, f"record {expected} is missing (the next segment, {path.name}, starts at {first})"
                )
            if first < expected:
                raise JournalCorrupt(expected, f"segment {path.name} starts at record {first}, expected {expected}")
            data = path.read_bytes()
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
                if h.seq >= from_seq:
                    yield record
                if to_seq is not None and h.seq >= to_seq:
                    return
            end = walk_end(data, walk)
            if end.torn_at is not None and i == len(segs) - 1:
                self.torn_tail = True
                return
            if end.torn_at is not None or end.damage is not None:
                raise JournalCorrupt(expected, f"{path.name}: {end.damage or f'a torn frame at byte {end.torn_at}'}")

    def headers(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[Header]:
        """The headers of :meth:`records` (each record read and checked whole)."""
        for record in self.records(from_seq, to_seq):
            yield record.header

    def head(self) -> Header | None:
        """The last record's header (reading the last segment that holds one)."""
        for first, _ in reversed(segments(self.directory)):
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
