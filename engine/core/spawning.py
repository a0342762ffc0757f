"""Where entities come from: fresh entities (at the start and from the population floor), entities
placed by trusted callers, newborns, and what a newborn inherits.

DNA: every entity carries ``dna``, DNA_GENES floats in 0..1 (random for fresh entities, the
parent's with small seeded Gaussian noise for newborns). Each trait name maps to one gene by
``zlib.crc32`` (:func:`trait_gene`; stable across processes, unlike ``hash()``). A newborn
inherits its parent's traits and, with probability ``trait_gain_chance``, gains one available
trait it does not carry yet (at most ``max_traits_per_entity``), picked with weight
``TRAIT_WEIGHT_FLOOR + dna[trait_gene(name)]``.

Each function draws from the random streams it is given, in a fixed order; the world decides
which streams those are (``World._rng``)."""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from genesis.entity_api import MAX_SPEED

from .model import Entity, WorldParams

DNA_GENES = 8
# Added to a trait's gene when weighting the choice of a new trait, so that a gene at 0.0
# makes a trait unlikely rather than impossible.
TRAIT_WEIGHT_FLOOR = 0.05

_PI = math.pi
_TWO_PI = 2.0 * math.pi


def trait_gene(name: str) -> int:
    """The DNA gene that weights ``name`` (a stable hash: the same in every process)."""
    return zlib.crc32(name.encode("utf-8")) % DNA_GENES


def new_max_age(params: WorldParams, rng: random.Random) -> int:
    """``max_age`` jittered by up to ``max_age_jitter`` either way (one draw)."""
    jitter = params.max_age_jitter
    return max(1, round(params.max_age * (1.0 + (rng.random() * 2.0 - 1.0) * jitter)))


def fresh_entity(
    eid: int, params: WorldParams, xmax: float, ymax: float, rng: random.Random, dna_rng: random.Random
) -> Entity:
    """A generation-0 entity at a random place with random speed, direction and max age (drawn
    from ``rng``) and random DNA (from ``dna_rng``); ``xmax``/``ymax``: the largest coordinates."""
    p = params
    e = Entity(
        id=eid,
        x=min(rng.random() * p.width, xmax),
        y=min(rng.random() * p.height, ymax),
        energy=float(min(p.initial_energy, p.max_energy)),
        max_energy=float(p.max_energy),
        speed=min(MAX_SPEED, p.initial_speed_min + rng.random() * (p.initial_speed_max - p.initial_speed_min)),
        direction=rng.random() * _TWO_PI - _PI,
        age=0,
        max_age=new_max_age(p, rng),
    )
    e.dna = tuple(dna_rng.random() for _ in range(DNA_GENES))
    return e


def placed_entity(
    eid: int, x: float, y: float, attrs: Mapping[str, Any], params: WorldParams, xmax: float, ymax: float
) -> Entity:
    """``World.add_entity``'s entity: a fresh generation-0 entity with ``params.initial_energy``,
    mid initial speed, the un-jittered max_age and neutral DNA (every gene 0.5), at (x, y) clamped
    into the world, with ``attrs`` overriding any field but ``id``."""
    if "id" in attrs:
        raise ValueError("ids are assigned by the world")
    p = params
    values: dict[str, Any] = {
        "energy": float(min(p.initial_energy, p.max_energy)),
        "max_energy": float(p.max_energy),
        "speed": min(MAX_SPEED, (p.initial_speed_min + p.initial_speed_max) / 2.0),
        "direction": 0.0,
        "age": 0,
        "max_age": int(p.max_age),
    }
    values.update(attrs)
    values["traits"] = tuple(values.get("traits", ()))
    dna = tuple(float(g) for g in values.get("dna", (0.5,) * DNA_GENES))
    if len(dna) != DNA_GENES or not all(0.0 <= g <= 1.0 for g in dna):
        raise ValueError(f"dna must be {DNA_GENES} numbers in 0..1")
    values["dna"] = dna
    return Entity(
        id=eid,
        x=min(max(float(x), 0.0), xmax),
        y=min(max(float(y), 0.0), ymax),
        **values,
    )


def newborn(
    parent: Entity, cid: int, params: WorldParams, xmax: float, ymax: float, rng: random.Random, dna_rng: random.Random
) -> Entity:
    """The child ``cid`` of ``parent``: placed just beyond collision range in a random direction,
    then given a max age (two draws from ``rng``, in that order), the parent's traits, speed and
    rate, and its DNA mutated (from ``dna_rng``). Energy: ``birth_energy_fraction`` of the cost
    of reproducing."""
    p = params
    angle = rng.random() * _TWO_PI - _PI
    offset = 2.0 * p.collision_radius + 1.0
    bx = parent.x + math.cos(angle) * offset
    by = parent.y + math.sin(angle) * offset
    child = Entity(
        id=cid,
        x=min(max(bx, 0.0), xmax),
        y=min(max(by, 0.0), ymax),
        energy=min(p.reproduction_cost * p.birth_energy_fraction, parent.max_energy),
        max_energy=parent.max_energy,
        speed=parent.speed,
        direction=angle,
        age=0,
        max_age=new_max_age(p, rng),
        state="",
        traits=parent.traits,
        energy_consumption_rate=parent.energy_consumption_rate,
        generation=parent.generation + 1,
        parent_id=parent.id,
    )
    child.dna = mutate_dna(parent.dna, p.dna_mutation, dna_rng)
    return child


def mutate_dna(dna: tuple[float, ...], sigma: float, rng: random.Random) -> tuple[float, ...]:
    """Each gene plus Gaussian noise of standard deviation ``sigma``, clamped into 0..1."""
    if sigma <= 0.0:
        return dna
    gauss = rng.gauss
    out = []
    for g in dna:
        g += gauss(0.0, sigma)
        out.append(0.0 if g < 0.0 else 1.0 if g > 1.0 else g)
    return tuple(out)


def new_trait(
    e: Entity, available: Sequence[str], genes: Mapping[str, int], params: WorldParams, rng: random.Random
) -> str | None:
    """Maybe one new trait of ``available`` for the newborn ``e``, weighted by its DNA
    (``genes``: each available trait's gene)."""
    if not available or len(e.traits) >= params.max_traits_per_entity:
        return None
    if rng.random() >= params.trait_gain_chance:
        return None
    carried = e.traits
    candidates = [t for t in available if t not in carried]
    if not candidates:
        return None
    dna = e.dna
    weights = [TRAIT_WEIGHT_FLOOR + (dna[genes[t]] if len(dna) == DNA_GENES else 0.5) for t in candidates]
    pick = rng.random() * sum(weights)
    for name, w in zip(candidates, weights):
        pick -= w
        if pick < 0.0:
            return name
    return candidates[-1]
