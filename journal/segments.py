"""Segment files of a journal directory: ``seg-<first seq, 20 digits>.gjl``, in sequence order.
The names alone say where each record is: nothing else indexes the journal. An archive
(journal/retention.py) holds the same segments zstd-compressed whole, ``….gjl.zst``; readers
read either."""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from pathlib import Path

import zstandard

from . import framing

_NAME = re.compile(r"^seg-(\d{20})\.gjl(\.zst)?$")
COMPRESSED = ".zst"


def segment_name(first_seq: int) -> str:
    return f"seg-{first_seq:020d}.gjl"


def read_segment(path: Path, offset: int = 0) -> bytes:
    """A segment's bytes from ``offset`` (an archived one decompressed first)."""
    if path.name.endswith(COMPRESSED):
        return zstandard.ZstdDecompressor().decompress(path.read_bytes(), max_output_size=1 << 31)[offset:]
    with path.open("rb") as f:
        f.seek(offset)
        return f.read()


def segments(directory: Path) -> list[tuple[int, Path]]:
    """(first seq, path) of every segment, in order; other files are not the journal's."""
    if not directory.is_dir():
        return []
    found = []
    for path in directory.iterdir():
        m = _NAME.match(path.name)
        if m:
            found.append((int(m.group(1)), path))
    return sorted(found)


@dataclass(frozen=True)
class WalkEnd:
    """How a segment's walk ended when it did not reach the end of the file."""

    torn_at: int | None = None  # a torn tail starts here: the bytes from here on were never a record
    damage: str | None = None  # or the segment is damaged here, for this reason


def walk_end(data: bytes, walk: framing.Walk) -> WalkEnd:
    """What stopped ``walk`` over ``data``: nothing (it reached the end), a torn tail, or damage."""
    if walk.torn_at is not None:
        at = walk.torn_at
    elif walk.error is not None:
        at = walk.error.offset
        if not walk.error.crc:
            return WalkEnd(damage=str(walk.error))
    else:
        return WalkEnd()
    if really_torn(data, at):
        return WalkEnd(torn_at=at)
    return WalkEnd(damage=str(walk.error) if walk.error is not None else f"at byte {at}: a damaged frame")


def really_torn(data: bytes, at: int) -> bool:
    """Whether the frame at ``at``, where a walk over ``data`` stopped, can be a write that never
    finished rather than damage. Two things end a segment that way:

    - a write the process did not finish: the frame runs past the end of the file;
    - a machine crash after the file's size reached the disk but not all of its data: the file
      ends in zero bytes that cover the frame's CRC (a real CRC is not four zero bytes).

    Either way it is the file's last frame, so no complete, valid frame may start at or after it:
    a changed length field would make a whole frame, and all after it, look torn."""
    size = len(data)
    zeros_from = len(data.rstrip(b"\x00"))
    if size - at > framing.OVERHEAD and _complete_at(data, at, size - at - framing.OVERHEAD):
        return False
    if size - at >= 4:
        (length,) = framing._HEAD.unpack_from(data, at)
        end = at + 4 + length + 4
        if end <= size and zeros_from > end - 4:
            return False  # a whole frame whose CRC the crash did not zero: damaged, not torn
    for q in range(at + 1, min(size - framing.OVERHEAD + 1, zeros_from)):
        (length,) = framing._HEAD.unpack_from(data, q)
        if 1 <= length <= size - q - framing.OVERHEAD and _complete_at(data, q, length):
            return False
    return True


def _complete_at(data: bytes, pos: int, length: int) -> bool:
    body = data[pos + 4 : pos + 4 + length]
    (crc,) = framing._HEAD.unpack_from(data, pos + 4 + length)
    return len(body) == length and body[:1] in (b"\x00", b"\x01") and zlib.crc32(body) == crc
