"""Frames of a journal segment: ``u32 length | body | u32 crc32(body)`` with ``body = u8 flags |
payload`` (flags 0: the payload as is, 1: zstd-compressed).

A reader walks frames from the start of a segment. A frame that runs past the end of the file
is a torn tail (a write the process did not finish); a frame whose CRC, flags or compression is
wrong, or whose length is absurd, is corruption; zero bytes to the end of the file are a torn tail
too (what a machine crash can leave where the last writes were). Compression is per frame, so a
changed byte spoils exactly one record."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator
from dataclasses import dataclass

import zstandard

RAW, ZSTD = 0, 1
COMPRESS_FROM = 512  # payloads at least this long are stored compressed
MAX_BODY = 256 << 20
OVERHEAD = 8  # the length before the body and the CRC after it
_HEAD = struct.Struct(">I")
_compressor = zstandard.ZstdCompressor(level=3)
_decompressor = zstandard.ZstdDecompressor()


class FrameError(Exception):
    """A frame that cannot be read: ``offset`` is where it starts; ``crc`` whether its CRC is
    what fails (the only way the zeros a machine crash leaves can show)."""

    def __init__(self, offset: int, reason: str, *, crc: bool = False) -> None:
        super().__init__(f"at byte {offset}: {reason}")
        self.offset = offset
        self.reason = reason
        self.crc = crc


def frame(payload: bytes) -> bytes:
    compress = len(payload) >= COMPRESS_FROM
    body = bytes([ZSTD]) + _compressor.compress(payload) if compress else bytes([RAW]) + payload
    return _HEAD.pack(len(body)) + body + _HEAD.pack(zlib.crc32(body))


@dataclass(frozen=True)
class Frame:
    offset: int  # where the frame starts in its segment
    end: int  # where the next one starts
    payload: bytes


@dataclass
class Walk:
    """How a walk over a segment's frames ended (after the iterator is exhausted)."""

    torn_at: int | None = None  # a torn tail starts here
    error: FrameError | None = None  # corruption found here


def frames(data: bytes, walk: Walk | None = None) -> Iterator[Frame]:
    """The frames of ``data`` in order; stops at a torn tail or corruption, noted in ``walk``."""
    walk = walk if walk is not None else Walk()
    pos, size = 0, len(data)
    while pos < size:
        if pos + 4 > size:
            walk.torn_at = pos
            return
        (length,) = _HEAD.unpack_from(data, pos)
        if length == 0 and data.count(0, pos) == size - pos:
            # zeros to the end: a file whose size reached the disk before its data did (a machine
            # crash); no frame starts with a zero length, so nothing whole was written there
            walk.torn_at = pos
            return
        if length < 1 or length > MAX_BODY:
            walk.error = FrameError(pos, f"impossible frame length {length}")
            return
        end = pos + 4 + length + 4
        if end > size:
            walk.torn_at = pos
            return
        body = data[pos + 4 : pos + 4 + length]
        (crc,) = _HEAD.unpack_from(data, pos + 4 + length)
        if zlib.crc32(body) != crc:
            walk.error = FrameError(pos, "CRC mismatch", crc=True)
            return
        flags = body[0]
        if flags == RAW:
            payload = body[1:]
        elif flags == ZSTD:
            try:
                payload = _decompressor.decompress(body[1:], max_output_size=MAX_BODY)
            except zstandard.ZstdError as exc:
                walk.error = FrameError(pos, f"does not decompress: {exc}")
                return
        else:
            walk.error = FrameError(pos, f"unknown flags {flags}")
            return
        yield Frame(pos, end, payload)
        pos = end
