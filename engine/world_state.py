"""A world's exact state as data: the save/resume format of ``World.snapshot`` (plain JSON-safe
data that resumes a world exactly; not the telemetry WorldSnapshot) and the state hash (one
digest of the exact state: replay and the sandbox compare worlds by it)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from .model import DEATH_CAUSES, Counters, Entity, Resource
from .spawning import DNA_GENES

SNAPSHOT_VERSION = 2

# Entity fields in the state hash, besides parent_id, DNA, state and traits.
_HASH_INT_FIELDS = ("id", "age", "max_age", "generation")
_HASH_FLOAT_FIELDS = ("x", "y", "energy", "max_energy", "speed", "direction", "energy_consumption_rate")


def state_hash(
    tick: int, available_traits: Sequence[str], entities: Sequence[Entity], resources: Sequence[Resource]
) -> str:
    """sha256 hex of the exact state: tick, available traits, then entities and resources
    (ids ascending, as given) as one little-endian binary column per field (float64 bit patterns
    with -0.0 as 0.0, int64) plus every entity's state and traits as text. Exact bits rather than
    rounded text: a snapshot round-trips floats exactly, and packing columns costs a fraction of
    formatting every number (this runs inside a snapshot tick)."""
    digest = hashlib.sha256()
    digest.update(json.dumps([tick, list(available_traits), len(entities), len(resources)]).encode())

    def ints(values: Any, count: int) -> None:
        digest.update(np.fromiter(values, dtype="<i8", count=count).tobytes())

    def floats(values: Any, count: int) -> None:
        # + 0.0 turns -0.0 into 0.0: states the physics cannot tell apart hash the same.
        digest.update((np.fromiter(values, dtype=np.float64, count=count) + 0.0).astype("<f8").tobytes())

    n = len(entities)
    for name in _HASH_INT_FIELDS:
        ints(map(attrgetter(name), entities), n)
    ints((-1 if e.parent_id is None else e.parent_id for e in entities), n)
    for name in _HASH_FLOAT_FIELDS:
        floats(map(attrgetter(name), entities), n)
    pad = (-1.0,) * DNA_GENES
    floats(chain.from_iterable(e.dna if len(e.dna) == DNA_GENES else pad for e in entities), n * DNA_GENES)
    # state and trait names hold no control characters (states are checked printable, trait
    # names snake_case), so the unit/record separators delimit them unambiguously.
    digest.update(
        "\x1e".join([e.state + "\x1f" + "\x1f".join(e.traits) for e in entities]).encode("utf-8", "backslashreplace")
    )
    ints(map(attrgetter("id"), resources), len(resources))
    for name in ("x", "y", "energy"):
        floats(map(attrgetter(name), resources), len(resources))
    return digest.hexdigest()


def counters_to_data(c: Counters) -> dict[str, Any]:
    return {
        "deaths": dict(c.deaths),
        "births": c.births,
        "respawns": c.respawns,
        "collisions": c.collisions,
        "rejected_intents": {r: c.rejected[r] for r in sorted(c.rejected)},
        "trait_births": {t: c.trait_births[t] for t in sorted(c.trait_births)},
        "trait_deaths": {t: dict(c.trait_deaths[t]) for t in sorted(c.trait_deaths)},
        "trait_gains": {t: c.trait_gains[t] for t in sorted(c.trait_gains)},
    }


def counters_from_data(c: Mapping[str, Any]) -> Counters:
    return Counters(
        deaths={cause: int(c["deaths"].get(cause, 0)) for cause in DEATH_CAUSES},
        births=int(c["births"]),
        respawns=int(c["respawns"]),
        collisions=int(c["collisions"]),
        rejected={str(k): int(v) for k, v in c["rejected_intents"].items()},
        trait_births={str(k): int(v) for k, v in c.get("trait_births", {}).items()},
        trait_deaths={
            str(k): {cause: int(v.get(cause, 0)) for cause in DEATH_CAUSES}
            for k, v in c.get("trait_deaths", {}).items()
        },
        trait_gains={str(k): int(v) for k, v in c.get("trait_gains", {}).items()},
    )


def entity_to_data(e: Entity) -> dict[str, Any]:
    return {
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
        "parent_id": e.parent_id,
        "dna": list(e.dna),
    }


def entity_from_data(d: Mapping[str, Any]) -> Entity:
    return Entity(
        id=int(d["id"]),
        x=float(d["x"]),
        y=float(d["y"]),
        energy=float(d["energy"]),
        max_energy=float(d["max_energy"]),
        speed=float(d["speed"]),
        direction=float(d["direction"]),
        age=int(d["age"]),
        max_age=int(d["max_age"]),
        state=str(d["state"]),
        traits=tuple(str(t) for t in d["traits"]),
        energy_consumption_rate=float(d["energy_consumption_rate"]),
        generation=int(d["generation"]),
        parent_id=None if d["parent_id"] is None else int(d["parent_id"]),
        dna=tuple(float(g) for g in d.get("dna", ())),
    )


def resource_to_data(r: Resource) -> dict[str, Any]:
    return {"id": r.id, "x": r.x, "y": r.y, "energy": r.energy}


def resource_from_data(d: Mapping[str, Any]) -> Resource:
    return Resource(id=int(d["id"]), x=float(d["x"]), y=float(d["y"]), energy=float(d["energy"]))
