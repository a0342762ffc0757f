"""What traits see: entity views, as plain dicts (one per entity) or in the compact columnar form
of the trait host's ``views`` request, and the reader of that form (:func:`decode_views`).

Values come in already gathered (entities, their number columns, what they sensed); the world
decides where they come from (``World.trait_views``)."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import numpy as np

from .model import Entity, WorldParams
from .sensing import Sensed

# The row layout of World.trait_views (the trait host's ``views`` request); "traits" holds an
# index into the request's ``trait_sets``; world_width/world_height are sent once.
VIEW_FIELDS = (
    "id",
    "x",
    "y",
    "energy",
    "max_energy",
    "speed",
    "direction",
    "age",
    "max_age",
    "state",
    "traits",
    "energy_consumption_rate",
    "generation",
    "neighbors",
    "nearest_dx",
    "nearest_dy",
    "nearest_dist",
)
# The view fields read straight from Entity attributes, with their column type.
VIEW_ATTR_COLUMNS = tuple(
    (name, np.int64 if name in ("id", "age", "max_age", "generation") else np.float64)
    for name in VIEW_FIELDS[:13]
    if name not in ("state", "traits")
)
_STATE = attrgetter("state")
_TRAITS = attrgetter("traits")

_INT32 = np.iinfo(np.int32)
_WIRE = {"f8": "<f8", "i8": "<i8", "i4": "<i4"}


def pack_array(values: np.ndarray, raw: bool = False) -> dict[str, Any]:
    """A column of the ``views`` request: ``{"same": value}`` when every row holds the same
    finite value (bit for bit), else base64 of a little-endian array: float64 as ``"f8"``,
    int64 as ``"i4"`` when every value fits in 32 bits, else ``"i8"``. Fewer bytes cross to the
    host: at thousands of entities, moving and decoding them is a large part of a tick."""
    if values.dtype.kind == "f":
        code = "f8"
        if len(values):
            first = values[0]
            bits = values.view(np.int64)
            if np.isfinite(first) and (bits == bits[0]).all():
                return {"same": float(first)}
    elif not len(values):
        code = "i4"
    else:  # ints: one min and one max tell both whether all are the same and whether they fit
        lo, hi = int(values.min()), int(values.max())
        if lo == hi:
            return {"same": lo}
        code = "i4" if lo >= _INT32.min and hi <= _INT32.max else "i8"
    data = values.astype(_WIRE[code]).tobytes()
    # raw: the bytes themselves, for a channel that carries them beside the JSON (an attachment)
    return {code: data if raw else base64.b64encode(data).decode("ascii")}


def decode_views(views: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The views of a :meth:`World.trait_views` message as dicts (for tests and tools)."""
    cols = []
    count = views["count"]
    for col in views["columns"]:
        if isinstance(col, dict) and "same" in col:
            cols.append([col["same"]] * count)
        elif isinstance(col, dict) and "text" in col:
            cols.append(col["text"].decode("utf-8").split("\x1f") if count else [])
        elif isinstance(col, dict):
            ((code, data),) = col.items()
            data = data if isinstance(data, bytes) else base64.b64decode(data)
            cols.append(np.frombuffer(data, dtype=_WIRE[code]).tolist())
        else:
            cols.append(list(col))
    out = []
    sets = views["trait_sets"]
    for values in zip(*cols):
        v = dict(zip(views["fields"], values))
        v["traits"] = list(sets[v["traits"]])
        dx, dy, d = v.pop("nearest_dx"), v.pop("nearest_dy"), v.pop("nearest_dist")
        v["nearest_resource"] = None if dx != dx else [dx, dy, d]
        v.update(views["world"])
        out.append(v)
    return out


def carriers_to_run(
    entities: Mapping[int, Entity], run: Sequence[str] | None
) -> tuple[list[str], list[Entity], list[tuple[str, ...]], dict[tuple[str, ...], int]]:
    """The traits to run (sorted; ``None``: every carried trait), the entities carrying one of
    them (ids ascending), their trait tuples, and the index of each distinct such tuple (in order
    of first appearance: the request's ``trait_sets``)."""
    if run is None:
        names: set[str] = set()
        for e in entities.values():
            names.update(e.traits)
        run_names = sorted(names)
    else:
        run_names = sorted(set(run))
    wanted = frozenset(run_names)
    everybody = list(map(entities.__getitem__, sorted(entities)))
    carried = list(map(_TRAITS, everybody))
    set_index = {t: 0 for t in dict.fromkeys(carried) if t and not wanted.isdisjoint(t)}
    for i, t in enumerate(set_index):
        set_index[t] = i
    if len(set_index) == len(set(carried)):  # everybody carries a trait to run
        carriers = everybody
    else:
        carriers = [e for e, t in zip(everybody, carried) if t in set_index]
        carried = list(map(_TRAITS, carriers))
    return run_names, carriers, carried, set_index


def pack_views(
    run_names: list[str],
    carriers: list[Entity],
    carried: list[tuple[str, ...]],
    set_index: dict[tuple[str, ...], int],
    values: Mapping[str, np.ndarray],
    sensed: Sensed,
    params: WorldParams,
    raw: bool,
) -> dict[str, Any]:
    """The ``views`` request of :func:`carriers_to_run`'s carriers, given their
    ``VIEW_ATTR_COLUMNS`` (``values``) and what they sensed (see ``World.trait_views``)."""
    n = len(carriers)
    columns: dict[str, Any] = {name: pack_array(values[name], raw) for name, _ in VIEW_ATTR_COLUMNS}
    states = list(map(_STATE, carriers))
    if n and states.count(states[0]) == n:
        columns["state"] = {"same": states[0]}
    elif raw:  # states are printable: the unit separator cannot occur in one
        columns["state"] = {"text": "\x1f".join(states).encode("utf-8")}
    else:
        columns["state"] = states
    columns["traits"] = pack_array(np.fromiter(map(set_index.__getitem__, carried), dtype=np.int64, count=n), raw)
    columns["neighbors"] = pack_array(sensed.neighbors, raw)
    columns["nearest_dx"] = pack_array(sensed.dx, raw)
    columns["nearest_dy"] = pack_array(sensed.dy, raw)
    columns["nearest_dist"] = pack_array(sensed.dist, raw)
    return {
        "fields": list(VIEW_FIELDS),
        "columns": [columns[name] for name in VIEW_FIELDS],
        "count": n,
        "world": {"world_width": float(params.width), "world_height": float(params.height)},
        "trait_sets": [list(t) for t in set_index],
        "run": run_names,
    }


def entity_views(
    ents: list[Entity], sensed: Mapping[int, tuple[int, list[float] | None]], params: WorldParams
) -> dict[int, dict[str, Any]]:
    """Entity views (plain JSON-safe dicts) for ``ents``, keyed by id; ``sensed``: each one's
    neighbour count and nearest resource ([dx, dy, distance] or None), by id."""
    width = float(params.width)
    height = float(params.height)
    out: dict[int, dict[str, Any]] = {}
    for e in ents:
        n, nearest = sensed[e.id]
        out[e.id] = {
            "id": e.id,
            "x": e.x,
            "y": e.y,
            "energy": e.energy,
            "max_energy": e.max_energy,
            "speed": e.speed,
            "direction": e.direction,
            "age": e.age,
            "max_age": e.max_age,
            "state": e.state,
            "traits": list(e.traits),
            "energy_consumption_rate": e.energy_consumption_rate,
            "generation": e.generation,
            "neighbors": n,
            "world_width": width,
            "world_height": height,
            "nearest_resource": nearest,
        }
    return out


def batches_by_trait(carriers: list[Entity], views: Mapping[int, dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Trait name (sorted) -> the views of its carriers, in the carriers' order; an entity
    carrying several traits appears as the same dict object in each of its traits' lists."""
    batches: dict[str, list[dict[str, Any]]] = {}
    for e in carriers:
        v = views[e.id]
        for name in e.traits:
            lst = batches.get(name)
            if lst is None:
                batches[name] = [v]
            else:
                lst.append(v)
    return {name: batches[name] for name in sorted(batches)}
