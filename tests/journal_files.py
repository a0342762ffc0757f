"""A journal's files as tests write and read them: N ticks of inputs written, the byte spans of
their frames, a snapshot's metadata."""

from __future__ import annotations

import random
from pathlib import Path

from journal.framing import frames
from journal.record import Header
from journal.segments import segments
from journal.snapshots import SnapshotMeta
from journal.writer import JournalWriter

N = 24


def inputs_of(i: int) -> dict:
    """Small records (stored raw) and large ones (compressed) in turn."""
    if i % 3 == 0:
        return {"tick": i, "intents": {"a": random.Random(i).randbytes(3000), "b": bytes(2000)}}
    return {"tick": i, "host": "idle"}


def write(directory: Path, n: int = N, **kw) -> list[Header]:
    writer = JournalWriter.open(directory, fsync_interval_s=0, **kw)
    try:
        return [writer.append("tick", 0, i + 1, inputs_of(i), bytes([i % 256]) * 32) for i in range(n)]
    finally:
        writer.close()


def frame_spans(directory: Path) -> list[tuple[Path, int, int]]:
    """(segment, start, end) of every frame, in record order."""
    spans = []
    for _, path in segments(directory):
        spans += [(path, f.offset, f.end) for f in frames(path.read_bytes())]
    return spans


def meta(tick: int, seq: int = 0, epoch: int = 0) -> SnapshotMeta:
    return SnapshotMeta(
        "", -1, epoch, tick, seq, bytes(32), bytes([tick % 256]) * 32, "1", {"t": "mut_aaaaaa"}, 1.5, b"", 0
    )
