"""Where two runs of the world part: the fields, entities and values that differ at a tick, read
from the probes of their states (``engine.core.state_digest``) — the recorded run's from its journal,
the replay's from the world it rebuilt.

Per field a probe holds ``sum(v)`` and ``sum(id * v)`` over the 64-bit patterns of the column,
mod 2**64. If exactly one entity differs in a field by ``d`` (as patterns), the sums differ by
``d`` and ``id * d``: the id follows (the inverse of ``d`` mod 2**64, up to the powers of two in
``d``, which leave a few candidates of which exactly one lives), and the recorded value is the
replay's plus ``d``. An entity in one run only shows in the id column the same way (``id`` and
``id * id``). Several entities differing in one field are reported as the field alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .state_digest import FLOAT_PROBE_FIELDS, PROBE_FIELDS, TEXT_FIELD, StateColumns

_MOD = 1 << 64


@dataclass(frozen=True)
class Difference:
    field: str  # a name of state_digest.PROBE_FIELDS ("resource.*" fields: the entity is a resource id)
    entity: int | None  # the one entity (or resource) that differs; None when several do
    recorded: Any = None  # its value in the recorded run (numbers only)
    replayed: Any = None  # its value in the replay
    note: str = ""

    def to_data(self) -> dict[str, Any]:
        return {
            "field": self.field,
            "entity": self.entity,
            "recorded": self.recorded,
            "replayed": self.replayed,
            "note": self.note,
        }


def _pairs(packed: bytes) -> list[list[int]]:
    return np.frombuffer(packed, dtype=">u8").reshape(-1, 2).tolist()


def _signed(v: int) -> int:
    return v - _MOD if v >= 1 << 63 else v


def _single_id(d0: int, d1: int, ids: set[int]) -> int | None:
    """The one id k with d1 == k * d0 (mod 2**64) among ``ids``, or None."""
    if d0 == 0:
        return None
    shift = (d0 & -d0).bit_length() - 1  # the powers of two in d0
    if d1 % (1 << shift):
        return None
    modulus = _MOD >> shift
    k = ((d1 >> shift) * pow(d0 >> shift, -1, modulus)) % modulus
    found = [c for c in ids if c % modulus == k]  # the ids the powers of two in d0 leave possible
    return found[0] if len(found) == 1 else None


def _value(bits: int, is_float: bool) -> float | int:
    pattern = np.array([bits % _MOD], dtype=np.uint64)
    return float(pattern.view(np.float64)[0]) if is_float else int(pattern.view(np.int64)[0])


def _column(cols: StateColumns, field: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(ids, values) of a numeric field in the replayed state."""
    if field.startswith("resource."):
        return cols.resources["id"], cols.resources[field.split(".", 1)[1]]
    ids = cols.numbers["id"]
    if field in cols.numbers:
        return ids, cols.numbers[field]
    if field == "parent_id":
        return ids, cols.parent
    if field.startswith("dna["):
        return ids, cols.dna[:, int(field[4:-1])]
    return None


def differences(recorded: dict, replayed: dict, cols: StateColumns) -> list[Difference]:
    """What differs between the recorded probe and the replay's (whose state is ``cols``)."""
    sums = recorded.get("sums")
    if recorded.get("v") != replayed.get("v") or type(sums) is not bytes or len(sums) != 16 * len(PROBE_FIELDS):
        return [Difference("probe", None, note="the recorded probe has another version: fields cannot be named")]
    out: list[Difference] = []
    entity_ids = set(cols.numbers["id"].tolist())
    resource_ids = set(cols.resources["id"].tolist())
    sets_differ = {"entity": False, "resource": False}
    for field, (r0, r1), (p0, p1) in zip(PROBE_FIELDS, _pairs(sums), _pairs(replayed["sums"])):
        if (r0, r1) == (p0, p1):
            continue
        d0, d1 = (r0 - p0) % _MOD, (r1 - p1) % _MOD
        is_resource = field.startswith("resource.")
        kind = "resource" if is_resource else "entity"
        if field in ("id", "resource.id"):
            sets_differ[kind] = True
            k = _signed(d0)
            if k > 0 and d1 == (k * k) % _MOD:
                out.append(Difference(field, k, note=f"{kind} {k} exists in the recorded run only"))
            elif k < 0 and d1 == (-k * k) % _MOD:
                out.append(Difference(field, -k, note=f"{kind} {-k} exists in the replay only"))
            else:
                out.append(Difference(field, None, note=f"the {kind} sets differ in several ids"))
            continue
        if sets_differ[kind]:
            out.append(Difference(field, None, note=f"differs (the {kind} sets differ too)"))
            continue
        one = _single_id(d0, d1, resource_ids if is_resource else entity_ids)
        if one is None:
            out.append(Difference(field, None, note="several entities differ"))
            continue
        if field == TEXT_FIELD:
            at = int(np.searchsorted(cols.numbers["id"], one))
            out.append(Difference(field, one, replayed=cols.texts[at].replace("\x1f", " ")))
            continue
        column = _column(cols, field)
        if column is None:
            out.append(Difference(field, one))
            continue
        ids, values = column
        at = int(np.searchsorted(ids, one))
        is_float = field in FLOAT_PROBE_FIELDS
        mine = values[at].item()
        bits = int(np.array([mine + 0.0 if is_float else mine], dtype="<f8" if is_float else "<i8").view(np.uint64)[0])
        out.append(Difference(field, one, recorded=_value(bits + d0, is_float), replayed=mine))
    return out
