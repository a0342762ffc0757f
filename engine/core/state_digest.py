"""The state hash of a world and its probe: one digest of the exact state, cheap enough to take
after every tick, and a small fingerprint per field that names what differs when two runs part.

The hash is sha256 over: the tick, the available traits and the counts; then every entity field
as one little-endian column (ids ascending; float64 bit patterns with -0.0 as 0.0, int64); each
entity's state and traits as text; the resources' columns; agents' members and their bodies (when
there are any); and last the probe. Exact bits rather
than rounded text: a snapshot round-trips floats exactly, and hashing columns costs a fraction of
formatting numbers.

The probe holds, per field, two sums over the column's 64-bit patterns ``v`` (wrapping mod 2**64):
``sum(v)`` and ``sum(id * v)``. When one entity differs in a field between two runs, the two
differences give its id (``sum(id * v)`` moved by ``id`` times what ``sum(v)`` moved) and its other
value; when several differ, the field is still named. The probe is part of the hashed data, so a
journal header that binds the hash binds the probe too (``engine.core.divergence`` reads it).
"""

from __future__ import annotations

import hashlib
import json
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .spawning import DNA_GENES

PROBE_VERSION = 1
# The world's columns (World._columns) that enter the hash, in this order.
NUMBER_FIELDS = (
    "id",
    "x",
    "y",
    "energy",
    "max_energy",
    "age",
    "max_age",
    "generation",
    "speed",
    "direction",
    "energy_consumption_rate",
)
INT_FIELDS = frozenset({"id", "age", "max_age", "generation"})
DNA_FIELDS = tuple(f"dna[{i}]" for i in range(DNA_GENES))
TEXT_FIELD = "state+traits"
RESOURCE_FIELDS = ("resource.id", "resource.x", "resource.y", "resource.energy")
# The probe's sums, in this order (entity fields weighted by entity id, resources by resource id).
PROBE_FIELDS = NUMBER_FIELDS + ("parent_id",) + DNA_FIELDS + (TEXT_FIELD,) + RESOURCE_FIELDS
FLOAT_PROBE_FIELDS = frozenset(
    [f for f in NUMBER_FIELDS if f not in INT_FIELDS] + list(DNA_FIELDS) + list(RESOURCE_FIELDS[1:])
)
_TEXT_CODES_MAX = 50_000
_NO_DNA = (-1.0,) * DNA_GENES


@dataclass
class StateColumns:
    """A world's exact state as columns, entities and resources ids ascending."""

    tick: int
    available_traits: Sequence[str]
    numbers: dict[str, np.ndarray]  # NUMBER_FIELDS
    parent: np.ndarray  # int64, -1 for none
    dna: np.ndarray  # (entities, DNA_GENES) float64; a row of -1.0 where DNA is missing
    texts: list[str]  # per entity: state, "\x1f", its traits joined by "\x1f"
    resources: dict[str, np.ndarray]  # id, x, y, energy
    members: list[tuple[int, int]] = field(default_factory=list)  # (member id, its body), ascending


@dataclass(frozen=True)
class Digest:
    state_hash: bytes  # 32 bytes
    # {"v", "n", "r", "sums": big-endian uint64 pairs (sum(v), sum(id*v)) in PROBE_FIELDS order}
    probe: dict[str, Any]

    @property
    def hex(self) -> str:
        return self.state_hash.hex()


def _bits(values: np.ndarray, is_float: bool) -> np.ndarray:
    """The column as little-endian 64-bit patterns (floats with -0.0 as 0.0)."""
    if is_float:
        return (np.asarray(values, dtype=np.float64) + 0.0).astype("<f8")
    return np.asarray(values).astype("<i8")


def _probe_sums(rows: np.ndarray) -> np.ndarray:
    """Per row: sum(v) and sum(id * v), wrapping mod 2**64 (the first row holds the ids)."""
    return np.stack([rows.sum(axis=1, dtype=np.uint64), (rows * rows[0]).sum(axis=1, dtype=np.uint64)], axis=1)


class ConstantColumns:
    """parent_id and DNA of the living entities (fixed at birth), kept from one tick to the next so
    that only newborns are read from their objects."""

    def __init__(self) -> None:
        self.ids = np.empty(0, dtype=np.int64)
        self.parent = np.empty(0, dtype=np.int64)
        self.dna = np.empty((0, DNA_GENES), dtype=np.float64)

    def of(self, ids: np.ndarray, entities: Mapping[int, Any]) -> tuple[np.ndarray, np.ndarray]:
        if np.array_equal(ids, self.ids):
            return self.parent, self.dna
        n = len(ids)
        parent = np.empty(n, dtype=np.int64)
        dna = np.empty((n, DNA_GENES), dtype=np.float64)
        known = np.zeros(n, dtype=bool)
        if len(self.ids) and n:
            at = np.searchsorted(self.ids, ids).clip(0, len(self.ids) - 1)
            known = self.ids[at] == ids
            parent[known] = self.parent[at[known]]
            dna[known] = self.dna[at[known]]
        for i in np.nonzero(~known)[0].tolist():
            e = entities[int(ids[i])]
            parent[i] = -1 if e.parent_id is None else e.parent_id
            dna[i] = e.dna if len(e.dna) == DNA_GENES else _NO_DNA
        self.ids, self.parent, self.dna = ids, parent, dna
        return parent, dna


class TextCodes:
    """crc32 of each entity's text, remembered per distinct text (few: states and trait sets repeat)."""

    def __init__(self) -> None:
        self._codes: dict[str, int] = {}

    def of(self, texts: list[str]) -> np.ndarray:
        codes = self._codes
        if len(codes) > _TEXT_CODES_MAX:
            codes.clear()
        for text in set(texts).difference(codes):
            codes[text] = zlib.crc32(text.encode("utf-8", "backslashreplace"))
        return np.fromiter(map(codes.__getitem__, texts), dtype=np.uint64, count=len(texts))


def digest(cols: StateColumns, text_codes: TextCodes | None = None) -> Digest:
    """The state hash and probe of ``cols``."""
    h = hashlib.sha256()
    n = len(cols.texts)
    res = cols.resources
    r = len(res["id"])
    h.update(json.dumps([cols.tick, list(cols.available_traits), n, r]).encode())
    # Each probe field's column as 64-bit patterns, one row per field (PROBE_FIELDS order): the
    # hash takes them column by column, the probe's sums come from all rows at once.
    rows = np.empty((len(NUMBER_FIELDS) + 1 + DNA_GENES + 1, n), dtype=np.uint64)
    for i, name in enumerate(NUMBER_FIELDS):
        bits = _bits(cols.numbers[name], name not in INT_FIELDS)
        h.update(bits.data)
        rows[i] = bits.view(np.uint64)
    parent = _bits(cols.parent, False)
    h.update(parent.data)
    rows[len(NUMBER_FIELDS)] = parent.view(np.uint64)
    dna = (np.asarray(cols.dna, dtype=np.float64).reshape(n, DNA_GENES) + 0.0).astype("<f8")
    h.update(dna.tobytes())
    rows[len(NUMBER_FIELDS) + 1 : -1] = dna.view(np.uint64).T
    text = "\x1e".join(cols.texts).encode("utf-8", "backslashreplace")
    h.update(text)
    rows[-1] = (text_codes or TextCodes()).of(cols.texts)
    resource_rows = np.empty((len(RESOURCE_FIELDS), r), dtype=np.uint64)
    for i, name in enumerate(("id", "x", "y", "energy")):
        bits = _bits(res[name], name != "id")
        h.update(bits.data)
        resource_rows[i] = bits.view(np.uint64)
    if cols.members:  # agents' members (a world without any hashes as it always did)
        h.update(json.dumps(["members", [list(pair) for pair in cols.members]]).encode())
    packed = np.concatenate([_probe_sums(rows), _probe_sums(resource_rows)]).astype(">u8").tobytes()
    probe = {"v": PROBE_VERSION, "n": n, "r": r, "sums": packed}
    h.update(json.dumps([PROBE_VERSION, n, r]).encode() + packed)
    return Digest(h.digest(), probe)
