"""Segment files of a journal directory: ``seg-<first seq, 20 digits>.gjl``, in sequence order.
The names alone say where each record is: nothing else indexes the journal."""

from __future__ import annotations

import re
from pathlib import Path

from . import framing

_NAME = re.compile(r"^seg-(\d{20})\.gjl$")


def segment_name(first_seq: int) -> str:
    return f"seg-{first_seq:020d}.gjl"


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


def really_torn(data: bytes, at: int) -> bool:
    """Whether what starts at ``at`` can be a write that never finished rather than a damaged
    frame: a torn write is the file's last frame, so no complete, valid frame may start at or
    after it (a changed length field would make a whole frame, and all after it, look torn)."""
    size = len(data)
    if size - at >= 9 and _complete_at(data, at, size - at - 8):
        return False
    for q in range(at + 1, size - 8):
        (length,) = framing._HEAD.unpack_from(data, q)
        if 1 <= length <= size - q - 8 and _complete_at(data, q, length):
            return False
    return True


def _complete_at(data: bytes, pos: int, length: int) -> bool:
    import zlib

    body = data[pos + 4 : pos + 4 + length]
    (crc,) = framing._HEAD.unpack_from(data, pos + 4 + length)
    return len(body) == length and body[:1] in (b"\x00", b"\x01") and zlib.crc32(body) == crc
