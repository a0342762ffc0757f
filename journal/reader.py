"""Reading a journal: records in order, each checked against the chain (sequence, parent hash,
inputs hash) and its frame (length, CRC, flags, compression). Readers never lock: they run beside
the live engine, and a torn tail of the last segment (a record being written) ends a walk quietly."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from .framing import Walk, frames
from .record import ZERO_HASH, Header, JournalCorrupt, JournalRecord, decode_record
from .segments import really_torn, segments


@dataclass
class ChainCheck:
    ok: bool
    checked: int
    first_bad_seq: int | None = None
    reason: str | None = None
    head: Header | None = None
    torn_tail: bool = False


class JournalReader:
    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.torn_tail = False  # the last walk ended at a torn tail

    def records(self, from_seq: int = 0, to_seq: int | None = None) -> Iterator[JournalRecord]:
        """The records ``from_seq`` through ``to_seq`` (None: the end), checked against the chain
        from the first record of the segment holding ``from_seq`` (whose parent is trusted).
        JournalCorrupt names the first record that breaks it."""
        self.torn_tail = False
        segs = segments(self.directory)
        start = 0
        for i, (first, _) in enumerate(segs):
            if first <= from_seq:
                start = i
        expected: int | None = None
        prev: Header | None = None
        for i in range(start, len(segs)):
            first, path = segs[i]
            if expected is not None and first != expected:
                raise JournalCorrupt(expected, f"segment {path.name} starts at record {first}")
            expected = first
            data = path.read_bytes()
            walk = Walk()
            for fr in frames(data, walk):
                record = decode_record(fr.payload, expected)
                h = record.header
                if h.seq > expected:
                    raise JournalCorrupt(expected, f"record {expected} is missing (found {h.seq})")
                if h.seq < expected:
                    raise JournalCorrupt(expected, f"expected record {expected}, found {h.seq} again")
                if prev is not None and h.parent_hash != prev.hash():
                    raise JournalCorrupt(h.seq, f"its parent hash does not match record {prev.seq}")
                if prev is None and h.seq == 0 and h.parent_hash != ZERO_HASH:
                    raise JournalCorrupt(0, "the first record must have the zero parent hash")
                prev = h
                expected += 1
                if to_seq is not None and h.seq > to_seq:
                    return
                if h.seq >= from_seq:
                    yield record
            if walk.error is not None:
                raise JournalCorrupt(expected, f"{path.name}: {walk.error}")
            if walk.torn_at is not None:
                if i == len(segs) - 1 and really_torn(data, walk.torn_at):
                    self.torn_tail = True
                    return
                raise JournalCorrupt(expected, f"{path.name}: a damaged frame at byte {walk.torn_at}")

    def head(self) -> Header | None:
        """The last record's header (reading the last segment)."""
        segs = segments(self.directory)
        for first, _ in reversed(segs):
            last = None
            for record in self.records(from_seq=first):
                last = record.header
            if last is not None:
                return last
        return None

    def verify_chain(self, from_seq: int = 0, to_seq: int | None = None) -> ChainCheck:
        checked = 0
        head: Header | None = None
        try:
            for record in self.records(from_seq, to_seq):
                checked += 1
                head = record.header
        except JournalCorrupt as exc:
            return ChainCheck(False, checked, exc.seq, exc.reason, head, self.torn_tail)
        return ChainCheck(True, checked, None, None, head, self.torn_tail)
