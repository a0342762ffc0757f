"""A journal record: a header in the hash chain and the record's body (a tick's inputs, or an
event), both canonical CBOR.

``Header.hash()`` is sha256 of the header's canonical encoding; each header names its
predecessor's hash (``parent_hash``; the first names :data:`ZERO_HASH`), the digest of its body
(``inputs_hash``) and the world's state hash after the record (``state_hash``). Sequence numbers
are gapless from 0. ``tick`` is the world's tick counter after the record."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

import cbor2

from genesis import canonical

ZERO_HASH = bytes(32)


class JournalCorrupt(Exception):
    """The journal breaks at ``seq`` (the record that should be there), for ``reason``."""

    def __init__(self, seq: int | None, reason: str) -> None:
        super().__init__(f"record {seq}: {reason}" if seq is not None else reason)
        self.seq = seq
        self.reason = reason


@dataclass(frozen=True)
class Header:
    seq: int
    epoch: int
    kind: str
    tick: int
    parent_hash: bytes
    inputs_hash: bytes
    state_hash: bytes

    def to_data(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "epoch": self.epoch,
            "kind": self.kind,
            "tick": self.tick,
            "parent": self.parent_hash,
            "inputs": self.inputs_hash,
            "state": self.state_hash,
        }

    def hash(self) -> bytes:
        return hashlib.sha256(canonical.encode(self.to_data())).digest()

    @classmethod
    def from_data(cls, d: Any) -> Header:
        if type(d) is not dict or set(d) != {"seq", "epoch", "kind", "tick", "parent", "inputs", "state"}:
            raise ValueError("a header has exactly seq, epoch, kind, tick, parent, inputs, state")
        for key in ("seq", "epoch", "tick"):
            if type(d[key]) is not int or d[key] < 0:
                raise ValueError(f"header {key} must be a non-negative int")
        if type(d["kind"]) is not str or not d["kind"]:
            raise ValueError("header kind must be a non-empty str")
        for key in ("parent", "inputs", "state"):
            if type(d[key]) is not bytes or len(d[key]) != 32:
                raise ValueError(f"header {key} must be 32 bytes")
        return cls(d["seq"], d["epoch"], d["kind"], d["tick"], d["parent"], d["inputs"], d["state"])


@dataclass(frozen=True)
class JournalRecord:
    header: Header
    inputs: dict[str, Any]


def encode_record(record: JournalRecord) -> bytes:
    return canonical.encode({"h": record.header.to_data(), "i": record.inputs})


_H_KEY = canonical.encode("h")
_I_KEY = canonical.encode("i")


def decode_record(payload: bytes, seq: int | None = None) -> JournalRecord:
    """The record of a frame's payload, checked to be exactly what the writer encodes: its header
    canonical, and its inputs the bytes whose sha256 the header holds (the writer hashed their
    canonical encoding, so matching bytes are canonical without encoding them again);
    JournalCorrupt (at ``seq``, the one expected) otherwise."""
    try:
        data = cbor2.loads(payload)
        if type(data) is not dict or set(data) != {"h", "i"} or type(data["i"]) is not dict:
            raise ValueError("a record is {h: header, i: inputs}")
        header = Header.from_data(data["h"])
        prefix = b"\xa2" + _H_KEY + canonical.encode(data["h"]) + _I_KEY
    except (cbor2.CBORDecodeError, canonical.NonCanonical, ValueError, TypeError, RecursionError) as exc:
        raise JournalCorrupt(seq, f"does not decode: {exc}") from None
    if not payload.startswith(prefix):
        raise JournalCorrupt(header.seq, "its header is not canonical CBOR")
    if hashlib.sha256(memoryview(payload)[len(prefix) :]).digest() != header.inputs_hash:
        raise JournalCorrupt(header.seq, "its inputs do not match the header's inputs hash")
    return JournalRecord(header, data["i"])
