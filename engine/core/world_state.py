"""A world's exact state as data: the save/resume format of ``World.snapshot`` (plain JSON-safe
data that resumes a world exactly; not the telemetry WorldSnapshot). The state hash is
``engine.core.state_digest``'s."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .model import DEATH_CAUSES, Counters, Entity, Resource

SNAPSHOT_VERSION = 2


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
