"""The pure world core: Molbots, resources and one deterministic tick.

No I/O, no asyncio, no wall clock; standard library only. Behaviour from traits arrives as
*intents* (plain, untrusted data produced by the trait host) which :meth:`World.step` checks
against the Entity API (``genesis.entity_api``) and applies; anything malformed is rejected
and counted by reason, never raised.

Determinism: every tick draws from one ``random.Random`` derived from ``(seed, tick)``,
entities are processed in ascending id order, resources are picked by (distance, id), and
nothing iterates over a set or depends on string hashing. Same seed + same intents gives the
same :meth:`World.state_hash`. :meth:`World.snapshot` / :meth:`World.from_snapshot` let a
world be saved and resumed (replay from a snapshot reproduces the hash).

Tick order (see :meth:`World.step`): intents -> movement -> eating -> metabolism ->
collisions -> aging -> births -> deaths -> population floor -> resource respawn -> tick + 1.
Phases 1-4 and 6 only touch the entity itself (eating takes resources lowest id first), so
they run over numpy columns of all entities at once (see :meth:`World.step`); the result is
bit-identical to running them entity by entity, phase by phase.

Intents (``{entity_id: [intent, ...]}``, ids must be exact ``int`` — convert JSON's string
keys before calling :meth:`World.step`; or the trait host's decoded columns,
:class:`genesis.trait_wire.IntentColumns`, which are checked the same way but applied in bulk):

- ``["set", attr, value]`` — only ``entity_api.WRITABLE_ATTRS``; numbers must be ``int`` or
  ``float`` (not bool) and finite, and are clamped to the attribute's bounds (``direction``
  wraps into -pi..pi); ``state`` must be a printable ``str`` of at most MAX_STATE_LENGTH.
- ``["move", dx, dy]`` — move along (dx, dy) at the entity's speed (the vector is a direction).
- ``["move_towards", x, y]`` — move towards a point at the entity's speed, without overshooting.
- ``["eat"]`` — eat the nearest resource within eat_radius this tick, hungry or not.

The distance moved per tick is ``min(speed, MAX_SPEED * min(1, energy_consumption_rate))``,
positions are clamped into ``0 <= x < width``, ``0 <= y < height``; the last move intent of
a tick wins; without one the entity wanders (small random turn, bouncing off walls).

The spatial layouts (engine/sensing.py) and the columns of world-owned numbers (position,
energy, max_energy, age, max_age, generation, kept between ticks) are kept current by the
world: change those only through :meth:`World.step`, :meth:`World.add_entity` and
:meth:`World.add_resource`, never by assigning to an Entity.

DNA and new traits: every entity carries ``dna``, DNA_GENES floats in 0..1 (random for fresh
entities, the parent's with small seeded Gaussian noise for newborns). Each trait name maps to
one gene by ``zlib.crc32`` (:func:`trait_gene`; stable across processes, unlike ``hash()``).
A newborn inherits its parent's traits and, with probability ``trait_gain_chance``, gains one
trait of :attr:`World.available_traits` it does not carry yet (at most
``max_traits_per_entity``), picked with weight ``TRAIT_WEIGHT_FLOOR + dna[trait_gene(name)]``.
Entities spawned by the population floor are newborns without a parent and may gain a trait
the same way; existing entities are never changed retroactively. DNA and trait choices draw
from a stream derived from (seed, entity id), so they never shift the tick's physics stream.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import random
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from itertools import chain
from operator import attrgetter
from typing import Any

import numpy as np

from genesis.entity_api import MAX_SPEED, MAX_STATE_LENGTH, READABLE_ATTRS, WRITABLE_ATTRS

from genesis.trait_wire import KIND_EAT, KIND_SET, KIND_TOWARDS, IntentColumns
from .sensing import Grid, Layout, Sensed, close_pairs, nearest, sense, two_steps_pay
from .spatial import SpatialGrid

__all__ = [
    "DEATH_CAUSES",
    "VIEW_FIELDS",
    "decode_views",
    "DNA_GENES",
    "REJECT_REASONS",
    "Entity",
    "Resource",
    "TickReport",
    "World",
    "WorldParams",
    "trait_gene",
]

_PI = math.pi
_TWO_PI = 2.0 * math.pi


DEATH_CAUSES = ("starvation", "age", "collision")

# The row layout of World.trait_views (the trait host's ``views`` request); "traits" holds an
# index into the request's ``trait_sets``; world_width/world_height are sent once.
VIEW_FIELDS = (
    "id", "x", "y", "energy", "max_energy", "speed", "direction", "age", "max_age", "state",
    "traits", "energy_consumption_rate", "generation", "neighbors",
    "nearest_dx", "nearest_dy", "nearest_dist",
)
# The view fields read straight from Entity attributes, with their column type.
_VIEW_ATTR_COLUMNS = tuple(
    (name, np.int64 if name in ("id", "age", "max_age", "generation") else np.float64)
    for name in VIEW_FIELDS[:13] if name not in ("state", "traits")
)
_STATE = attrgetter("state")
# Entity numbers that only World.step changes, intents included (kept as columns between ticks,
# World._columns).
_WORLD_COLUMNS = (("id", np.int64), ("x", np.float64), ("y", np.float64), ("energy", np.float64),
                  ("max_energy", np.float64), ("age", np.int64), ("max_age", np.int64), ("generation", np.int64),
                  ("speed", np.float64), ("direction", np.float64), ("energy_consumption_rate", np.float64))
_X = attrgetter("x")
_Y = attrgetter("y")
_ID = attrgetter("id")
_TRAITS = attrgetter("traits")
# Entity fields in the state hash (World.state_hash), besides parent_id, DNA, state and traits.
_HASH_INT_FIELDS = ("id", "age", "max_age", "generation")
_HASH_FLOAT_FIELDS = ("x", "y", "energy", "max_energy", "speed", "direction", "energy_consumption_rate")


_INT32 = np.iinfo(np.int32)
_WIRE = {"f8": "<f8", "i8": "<i8", "i4": "<i4"}


def _pack_array(values: np.ndarray, raw: bool = False) -> dict[str, Any]:
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
            (code, data), = col.items()
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

DNA_GENES = 8
# Added to a trait's gene when weighting the choice of a new trait, so that a gene at 0.0
# makes a trait unlikely rather than impossible.
TRAIT_WEIGHT_FLOOR = 0.05


def trait_gene(name: str) -> int:
    """The DNA gene that weights ``name`` (a stable hash: the same in every process)."""
    return zlib.crc32(name.encode("utf-8")) % DNA_GENES

# Why an intent (or a whole intent list) was rejected. ``rejected_intents`` counts these.
REJECT_REASONS = (
    "bad_intents",  # the intents argument is not a mapping
    "bad_entity_id",  # a key that is not an int (reported with entity id -1)
    "unknown_entity",  # no such entity ever existed
    "dead_entity",  # the entity existed but has died
    "bad_intent_list",  # an entity's intents are not a list/tuple
    "too_many_intents",  # more than max_intents_per_entity; the excess is dropped
    "malformed_intent",  # an intent that is not a non-empty list/tuple starting with a str
    "unknown_kind",  # first element not in entity_api.INTENT_KINDS
    "bad_arity",  # wrong number of elements for its kind
    "unknown_attr",  # set of a name that is not an entity attribute
    "read_only_attr",  # set of a readable but not writable attribute (energy, x, age, ...)
    "bad_type",  # wrong exact type (bool, str for a number, list, ...)
    "not_finite",  # NaN, inf, or an int too large for a float
    "bad_state",  # state string too long or not printable
)

@dataclass(frozen=True)
class WorldParams:
    width: float = 800.0
    height: float = 600.0
    initial_population: int = 40
    initial_resources: int = 60
    max_resources: int = 120
    resource_energy: float = 25.0
    resource_spawn_chance: float = 0.5  # chance per tick that one resource appears (below max)
    max_energy: float = 100.0
    initial_energy: float = 60.0
    initial_speed_min: float = 1.0
    initial_speed_max: float = 2.0
    wander_turn: float = 0.3  # max random turn (radians) per tick of instinctive wandering
    base_metabolism: float = 0.05  # energy per tick, times energy_consumption_rate
    move_cost: float = 0.02  # energy per distance unit moved
    max_age: int = 3000  # ticks
    max_age_jitter: float = 0.2  # each entity's max_age is max_age * (1 +- jitter)
    maturity_age: int = 300
    reproduction_threshold: float = 85.0
    reproduction_cost: float = 40.0  # paid by the parent
    birth_energy_fraction: float = 0.75  # the newborn starts with this part of the cost
    eat_radius: float = 6.0
    sense_radius: float = 80.0  # also the grid cell size
    collision_radius: float = 2.0
    collision_damage: float = 5.0  # per colliding pair per tick, to both
    hunger_fraction: float = 0.7  # instinct eats only below this fraction of max_energy
    min_population: int = 0  # if > 0, fresh entities are spawned to keep at least this many
    max_population: int = 1000  # births stop at this population
    max_traits_per_entity: int = 5
    max_intents_per_entity: int = 32  # the excess of an entity's intents in a tick is dropped
    trait_gain_chance: float = 0.25  # chance that a newborn gains one new available trait
    dna_mutation: float = 0.05  # standard deviation of the per-gene noise at birth
    temperature: float = 20.0  # environment knob reported in telemetry (no physics use yet)

    def __post_init__(self) -> None:
        for name in ("width", "height", "sense_radius"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0")
        for f in fields(self):
            v = getattr(self, f.name)
            if type(v) is bool or type(v) not in (int, float) or not math.isfinite(v):
                raise ValueError(f"{f.name} must be a finite number")
            if v < 0:
                raise ValueError(f"{f.name} must be >= 0")
            if f.type == "int" and type(v) is not int:
                raise ValueError(f"{f.name} must be an int")
        if self.initial_speed_min > self.initial_speed_max:
            raise ValueError("initial_speed_min must be <= initial_speed_max")
        if not 0.0 <= self.max_age_jitter < 1.0:
            raise ValueError("max_age_jitter must be in [0, 1)")
        if self.max_age < 1:
            raise ValueError("max_age must be >= 1")
        if not 0.0 <= self.trait_gain_chance <= 1.0:
            raise ValueError("trait_gain_chance must be in [0, 1]")


@dataclass(slots=True)
class Entity:
    id: int
    x: float
    y: float
    energy: float
    max_energy: float
    speed: float
    direction: float
    age: int
    max_age: int
    state: str = ""
    traits: tuple[str, ...] = ()
    energy_consumption_rate: float = 1.0
    generation: int = 0
    parent_id: int | None = None
    dna: tuple[float, ...] = ()


@dataclass(slots=True)
class Resource:
    id: int
    x: float
    y: float
    energy: float


# The writable attributes of the Entity API that this world stores (all of v1's).
_WRITABLE = {
    name: spec for name, spec in WRITABLE_ATTRS.items() if name in Entity.__dataclass_fields__
}


# name -> (lo, hi) of the writable numbers (World._apply_columns clamps them in bulk).
_NUMBERS = {name: (spec[1], spec[2]) for name, spec in _WRITABLE.items() if spec[0] != "str"}


def _set_speed(ents: Any, values: list[float]) -> None:
    for e, v in zip(ents, values):
        e.speed = v


def _set_direction(ents: Any, values: list[float]) -> None:
    for e, v in zip(ents, values):
        e.direction = v


def _set_rate(ents: Any, values: list[float]) -> None:
    for e, v in zip(ents, values):
        e.energy_consumption_rate = v


def _store_numbers(ents: list[Entity], x: np.ndarray, y: np.ndarray, direction: np.ndarray, energy: np.ndarray,
                   age: np.ndarray) -> None:
    """A step's new numbers into its entities (the columns in the entities' order)."""
    for e, ex, ey, ed, en, ag in zip(ents, x.tolist(), y.tolist(), direction.tolist(), energy.tolist(), age.tolist()):
        e.x = ex
        e.y = ey
        e.direction = ed
        e.energy = en
        e.age = ag


# One plain loop per number attribute (a store by name is cheaper than setattr per entity).
_SETTERS = {"speed": _set_speed, "direction": _set_direction, "energy_consumption_rate": _set_rate}
assert _SETTERS.keys() == _NUMBERS.keys()


@dataclass
class TickReport:
    tick: int  # the tick that was simulated (World.tick before it advanced)
    births: list[int] = field(default_factory=list)  # ids of newborns (parent via parent_id)
    deaths: list[tuple[int, str]] = field(default_factory=list)  # (entity_id, cause)
    rejected_intents: list[tuple[int, str]] = field(default_factory=list)  # (entity_id, reason)
    respawned: list[int] = field(default_factory=list)  # fresh entities from min_population
    gained: list[tuple[int, str]] = field(default_factory=list)  # (newborn id, new trait)


def _is_sorted(ids: np.ndarray) -> bool:
    return bool((ids[1:] >= ids[:-1]).all())


def _group(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``np.unique(ids, return_index, return_inverse, return_counts)``; without sorting when the
    ids come ascending already (the trait host sends them so; anything else is sorted here)."""
    if not _is_sorted(ids):
        return np.unique(ids, return_index=True, return_inverse=True, return_counts=True)
    new = np.concatenate(([True], ids[1:] != ids[:-1]))
    first = new.nonzero()[0]
    counts = np.diff(np.append(first, len(ids)))
    return ids[first], first, np.cumsum(new) - 1, counts


def _last_of_each(ids: np.ndarray) -> np.ndarray:
    """Indices of the last occurrence of each distinct id (ascending by id)."""
    if _is_sorted(ids):
        return np.append(ids[1:] != ids[:-1], True).nonzero()[0]
    _, first_in_reverse = np.unique(ids[::-1], return_index=True)
    return len(ids) - 1 - first_in_reverse


def _wrap_angle(a: float) -> float:
    """Wrap a finite angle into [-pi, pi]."""
    if -_PI <= a <= _PI:
        return a
    return math.remainder(a, _TWO_PI)


def _check_number(v: Any) -> float | str:
    """The value as a finite float, or the rejection reason."""
    t = type(v)
    if t is float:
        if v - v != 0.0:  # NaN or +-inf
            return "not_finite"
        return v
    if t is int:
        try:
            return float(v)
        except OverflowError:
            return "not_finite"
    return "bad_type"


class World:
    def __init__(self, params: WorldParams = WorldParams(), seed: int = 0) -> None:
        if type(params) is not WorldParams:
            raise TypeError("params must be a WorldParams")
        if type(seed) is not int:
            raise TypeError("seed must be an int")
        self.params = params
        self.seed = seed
        self.tick = 0
        self._entities: dict[int, Entity] = {}
        self.resources: dict[int, Resource] = {}
        self._next_entity_id = 1
        self._next_resource_id = 1
        self._deaths = {cause: 0 for cause in DEATH_CAUSES}
        self._births = 0
        self._respawns = 0
        self._collisions = 0
        self._rejected: dict[str, int] = {}
        self.available_traits: tuple[str, ...] = ()
        self._trait_genes: dict[str, int] = {}
        self._trait_births: dict[str, int] = {}  # births by carriers of the trait
        self._trait_deaths: dict[str, dict[str, int]] = {}  # deaths of carriers, by cause
        self._trait_gains: dict[str, int] = {}  # newborns that gained the trait
        self._set_bounds(params)
        self._rgrid = SpatialGrid(params.width, params.height, params.sense_radius)

        rng = self._rng("init")
        for _ in range(params.initial_population):
            self._spawn_fresh(rng)
        for _ in range(min(params.initial_resources, params.max_resources)):
            self._spawn_resource(rng)

    def _set_bounds(self, params: WorldParams) -> None:
        # Positions satisfy 0 <= x < width: the largest allowed value is just below width.
        self._xmax = math.nextafter(float(params.width), 0.0)
        self._ymax = math.nextafter(float(params.height), 0.0)
        # Every entity's / resource's position laid out by cell (engine/sensing.py), rebuilt
        # when None: step() leaves the entities' when nobody was born or died; adding a
        # resource or eating one drops the resources'.
        self._grid = Grid.over(params.width, params.height, params.sense_radius)
        # A finer grid for the short-range queries (collisions, eating): a 3x3 block of sense-radius
        # cells holds ~10x more candidates than they need. At most ~250,000 cells.
        near = max(params.collision_radius, params.eat_radius, params.sense_radius / 4.0,
                   math.sqrt(params.width * params.height / 250_000.0))
        self._near_grid = Grid.over(params.width, params.height, near)
        # Half the sense radius: most entities find their nearest resource within one such cell.
        self._half_grid = Grid.over(params.width, params.height, params.sense_radius / 2.0)
        self._positions: Layout | None = None
        self._resource_arrays: Layout | None = None
        self._resource_near: Layout | None = None
        self._resource_half: Layout | None = None
        # (ids, x, y) of the resources (ids ascending), kept as they are eaten and added
        self._resource_columns: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        # The numbers only the world changes (_WORLD_COLUMNS) of every entity, ids ascending, as
        # step() left them; None when an entity was added from outside. They are what the next
        # step and trait_views read: a number changed on an Entity from outside is not seen.
        self._columns: dict[str, np.ndarray] | None = None
        self._prepared: tuple | None = None  # prepare_step()
        # What step(lazy_write_back=True) computed and has not yet stored into the Entity objects:
        # (entities, x, y, direction, energy, age). Storing 5 numbers into each of 5,000 objects
        # costs ~3 ms, so the engine leaves it to whoever reads the entities next (``entities``,
        # or its prepare_step while the trait host computes) instead of holding up the tick.
        self._unwritten: tuple | None = None

    @property
    def entities(self) -> dict[int, Entity]:
        """The living entities by id, with every attribute up to date."""
        if self._unwritten is not None:
            self._write_back()
        return self._entities

    @entities.setter
    def entities(self, value: dict[int, Entity]) -> None:
        self._unwritten = None
        self._entities = value

    @property
    def population(self) -> int:
        return len(self._entities)

    def _write_back(self) -> None:
        unwritten, self._unwritten = self._unwritten, None
        if unwritten is not None:
            _store_numbers(*unwritten)

    def _cached_columns(self, ids: np.ndarray) -> dict[str, np.ndarray] | None:
        """:attr:`_columns` if they are those of exactly these entities (ids ascending)."""
        cols = self._columns
        if cols is None or not np.array_equal(cols["id"], ids):
            return None
        return cols

    def _entity_layout(self) -> Layout:
        if self._positions is None:
            ents = self.entities
            self._positions = Layout.of_items(self._grid, ents.values(), len(ents))
        return self._positions

    def _resource_layout(self) -> Layout:
        if self._resource_arrays is None:
            if self._resource_columns is None:
                res = list(self.resources.values())
                self._resource_columns = (np.fromiter(map(_ID, res), dtype=np.int64, count=len(res)),
                                          np.fromiter(map(_X, res), dtype=np.float64, count=len(res)),
                                          np.fromiter(map(_Y, res), dtype=np.float64, count=len(res)))
            ids, x, y = self._resource_columns
            self._resource_arrays = Layout(self._grid, x, y, ids)
        return self._resource_arrays

    def _resource_near_layout(self) -> Layout:
        if self._resource_near is None:
            lay = self._resource_layout()
            self._resource_near = Layout(self._near_grid, lay.x, lay.y, lay.ids)
        return self._resource_near

    def _resource_half_layout(self) -> Layout:
        if self._resource_half is None:
            lay = self._resource_layout()
            self._resource_half = Layout(self._half_grid, lay.x, lay.y, lay.ids)
        return self._resource_half

    def _near_resources_for(self, queries: int) -> Layout | None:
        """The finer resource layout for ``queries`` nearest-resource queries, if nearest() will
        use it (it is built only then)."""
        return self._resource_half_layout() if two_steps_pay(queries, self._resource_layout()) else None

    def _resources_changed(self) -> None:
        self._resource_arrays = None
        self._resource_near = None
        self._resource_half = None

    # -- randomness -------------------------------------------------------------------------

    def _rng(self, label: int | str) -> random.Random:
        digest = hashlib.sha256(f"genesis-world:{self.seed}:{label}".encode()).digest()
        return random.Random(int.from_bytes(digest[:16], "big"))

    # -- spawning ---------------------------------------------------------------------------

    def _new_max_age(self, rng: random.Random) -> int:
        p = self.params
        jitter = p.max_age_jitter
        return max(1, int(round(p.max_age * (1.0 + (rng.random() * 2.0 - 1.0) * jitter))))

    def _spawn_fresh(self, rng: random.Random) -> Entity:
        p = self.params
        eid = self._next_entity_id
        self._next_entity_id += 1
        e = Entity(
            id=eid,
            x=min(rng.random() * p.width, self._xmax),
            y=min(rng.random() * p.height, self._ymax),
            energy=float(min(p.initial_energy, p.max_energy)),
            max_energy=float(p.max_energy),
            speed=min(MAX_SPEED, p.initial_speed_min + rng.random() * (p.initial_speed_max - p.initial_speed_min)),
            direction=rng.random() * _TWO_PI - _PI,
            age=0,
            max_age=self._new_max_age(rng),
        )
        gen = self._rng(f"dna:{eid}")
        e.dna = tuple(gen.random() for _ in range(DNA_GENES))
        self.entities[eid] = e
        self._positions = None
        self._columns = None
        return e

    def _spawn_resource(self, rng: random.Random) -> Resource:
        p = self.params
        return self.add_resource(rng.random() * p.width, rng.random() * p.height)

    def add_entity(self, x: float, y: float, **attrs: Any) -> Entity:
        """Place a new entity (trusted callers: tests, scenario set-up, the sandbox test world).

        ``attrs`` may override any Entity field except ``id``; defaults are a fresh gen-0
        entity with ``params.initial_energy``, mid initial speed, the un-jittered max_age and
        neutral DNA (every gene 0.5).
        """
        if "id" in attrs:
            raise ValueError("ids are assigned by the world")
        p = self.params
        eid = self._next_entity_id
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
        e = Entity(
            id=eid,
            x=min(max(float(x), 0.0), self._xmax),
            y=min(max(float(y), 0.0), self._ymax),
            **values,
        )
        self._next_entity_id += 1
        self.entities[eid] = e
        self._positions = None
        self._columns = None
        return e

    def add_resource(self, x: float, y: float, energy: float | None = None) -> Resource:
        """Place a resource (trusted callers). Resources must not be moved afterwards."""
        rid = self._next_resource_id
        self._next_resource_id += 1
        r = Resource(
            id=rid,
            x=min(max(float(x), 0.0), self._xmax),
            y=min(max(float(y), 0.0), self._ymax),
            energy=float(self.params.resource_energy if energy is None else energy),
        )
        self.resources[rid] = r
        self._rgrid.insert(r)
        self._resources_changed()
        if self._resource_columns is not None:
            self._resource_columns = tuple(np.append(col, v) for col, v in zip(self._resource_columns, (rid, r.x, r.y)))
        return r

    # -- traits -----------------------------------------------------------------------------

    def give_trait(self, entity_id: int, trait_name: str) -> None:
        """Add a trait to one entity (no-op if it is gone, already has it, or is full)."""
        if type(trait_name) is not str or not trait_name:
            raise ValueError("trait_name must be a non-empty str")
        e = self.entities.get(entity_id)
        if e is None or trait_name in e.traits:
            return
        if len(e.traits) >= self.params.max_traits_per_entity:
            return
        e.traits = e.traits + (trait_name,)

    def give_trait_to_all(self, trait_name: str) -> None:
        for eid in sorted(self.entities):
            self.give_trait(eid, trait_name)

    def set_available_traits(self, names: Sequence[str]) -> None:
        """The traits newborns may gain (kept sorted and unique; order does not matter)."""
        if isinstance(names, str):
            raise TypeError("names must be a sequence of trait names, not a str")
        clean = []
        for name in names:
            if type(name) is not str or not name:
                raise ValueError("trait names must be non-empty str")
            clean.append(name)
        self.available_traits = tuple(sorted(set(clean)))
        self._trait_genes = {name: trait_gene(name) for name in self.available_traits}

    def remove_trait(self, trait_name: str) -> None:
        """Take a trait away from every entity and from the available traits (rollback)."""
        if trait_name in self.available_traits:
            self.set_available_traits([t for t in self.available_traits if t != trait_name])
        for eid in sorted(self.entities):
            e = self.entities[eid]
            if trait_name in e.traits:
                e.traits = tuple(t for t in e.traits if t != trait_name)

    def _mutate_dna(self, dna: tuple[float, ...], rng: random.Random) -> tuple[float, ...]:
        sigma = self.params.dna_mutation
        if sigma <= 0.0:
            return dna
        gauss = rng.gauss
        out = []
        for g in dna:
            g += gauss(0.0, sigma)
            out.append(0.0 if g < 0.0 else 1.0 if g > 1.0 else g)
        return tuple(out)

    def _new_trait(self, e: Entity, rng: random.Random) -> str | None:
        """Maybe one new available trait for the newborn ``e``, weighted by its DNA."""
        available = self.available_traits
        if not available or len(e.traits) >= self.params.max_traits_per_entity:
            return None
        if rng.random() >= self.params.trait_gain_chance:
            return None
        carried = e.traits
        candidates = [t for t in available if t not in carried]
        if not candidates:
            return None
        dna = e.dna
        genes = self._trait_genes
        weights = [
            TRAIT_WEIGHT_FLOOR + (dna[genes[t]] if len(dna) == DNA_GENES else 0.5)
            for t in candidates
        ]
        pick = rng.random() * sum(weights)
        for name, w in zip(candidates, weights):
            pick -= w
            if pick < 0.0:
                return name
        return candidates[-1]

    def _give_new_trait(self, e: Entity, rng: random.Random, report: TickReport) -> None:
        name = self._new_trait(e, rng)
        if name is not None:
            e.traits = e.traits + (name,)
            self._trait_gains[name] = self._trait_gains.get(name, 0) + 1
            report.gained.append((e.id, name))

    # -- views ------------------------------------------------------------------------------

    def _sense(self, ents: list[Entity]) -> Sensed:
        """Neighbour counts and nearest resources of ``ents`` (engine/sensing.py)."""
        n = len(ents)
        qx = np.fromiter(map(_X, ents), dtype=np.float64, count=n)
        qy = np.fromiter(map(_Y, ents), dtype=np.float64, count=n)
        return sense(qx, qy, self._entity_layout(), self._resource_layout(), self.params.sense_radius,
                     near_resources=self._near_resources_for(n))

    def _sensed_by_id(self, ents: list[Entity]) -> dict[int, tuple[int, list[float] | None]]:
        """(neighbour count, nearest resource as [dx, dy, distance] or None) for ``ents``, by id."""
        sensed = self._sense(ents)
        out: dict[int, tuple[int, list[float] | None]] = {}
        for e, n, dx, dy, d in zip(ents, sensed.neighbors.tolist(), sensed.dx.tolist(),
                                   sensed.dy.tolist(), sensed.dist.tolist()):
            out[e.id] = (n, None if dx != dx else [dx, dy, d])
        return out

    def _views(self, ents: list[Entity]) -> dict[int, dict[str, Any]]:
        """Entity views (plain JSON-safe dicts) for ``ents``, keyed by id."""
        p = self.params
        width = float(p.width)
        height = float(p.height)
        out: dict[int, dict[str, Any]] = {}
        sensed = self._sensed_by_id(ents)
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

    def trait_views(self, run: Sequence[str] | None = None, raw: bool = False) -> dict[str, Any]:
        """The carriers' views in the compact form of the trait host's ``views`` request.

        Each carrier appears once however many traits it carries, ids ascending, as one column
        per name of ``VIEW_FIELDS`` (``fields``): numbers as base64 of little-endian float64
        (``{"f8": ...}``), int32 (``{"i4": ...}``, ints that fit) or int64 (``{"i8": ...}``)
        arrays, ``state`` as a JSON list; a column whose rows all hold the same value is sent as
        ``{"same": value}`` (see ``_pack_array``). ``traits``
        is an index into ``trait_sets`` (the distinct carried trait tuples); the nearest resource
        is split into ``nearest_dx``/``nearest_dy``/``nearest_dist`` (NaN when none is in range);
        the world-wide values are sent once in ``world``. ``run`` lists the traits to run
        (sorted; default: every carried trait); only entities carrying one of them are sent.
        The values are exactly those of :meth:`trait_batches`; :func:`decode_views` reads it.
        ``raw``: the arrays as bytes rather than base64, and differing states as ``{"text": bytes}``
        (joined by "\x1f") rather than a list (for ``TraitHostContainer.request``, which sends bytes
        as the request's binary attachment).
        """
        entities = self._entities  # ids, traits and state are never left unwritten
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
        # the distinct carried tuples that hold a trait to run, in order of first appearance
        set_index = {t: 0 for t in dict.fromkeys(carried) if t and not wanted.isdisjoint(t)}
        for i, t in enumerate(set_index):
            set_index[t] = i
        if len(set_index) == len(set(carried)):  # everybody carries a trait to run
            carriers = everybody
        else:
            carriers = [e for e, t in zip(everybody, carried) if t in set_index]
            carried = list(map(_TRAITS, carriers))
        n = len(carriers)
        values: dict[str, np.ndarray] = {}
        cols = self._columns
        if cols is not None and n:
            everyone = n == len(entities)
            ids = np.array(sorted(entities) if everyone else [e.id for e in carriers], dtype=np.int64)
            cached = self._cached_columns(ids) if everyone else None
            if cached is not None:
                values = dict(cached)
            elif len(cols["id"]) == len(entities):
                at = np.searchsorted(cols["id"], ids).clip(0, len(cols["id"]) - 1)
                if np.array_equal(cols["id"][at], ids):
                    values = {name: col[at] for name, col in cols.items()}
        if any(name not in values for name, _ in _VIEW_ATTR_COLUMNS):  # read from the entities below
            self._write_back()
        for name, dtype in _VIEW_ATTR_COLUMNS:
            if name not in values:
                values[name] = np.fromiter(map(attrgetter(name), carriers), dtype=dtype, count=n)
        # every entity a carrier: the layout's points are the queries (entities are kept in id order)
        sensed = sense(values["x"], values["y"], self._entity_layout(), self._resource_layout(),
                       self.params.sense_radius, everyone=n == len(entities),
                       near_resources=self._near_resources_for(n))
        columns: dict[str, Any] = {name: _pack_array(values[name], raw) for name, _ in _VIEW_ATTR_COLUMNS}
        states = list(map(_STATE, carriers))
        if n and states.count(states[0]) == n:
            columns["state"] = {"same": states[0]}
        elif raw:  # states are printable: the unit separator cannot occur in one
            columns["state"] = {"text": "\x1f".join(states).encode("utf-8")}
        else:
            columns["state"] = states
        columns["traits"] = _pack_array(np.fromiter(map(set_index.__getitem__, carried), dtype=np.int64, count=n), raw)
        columns["neighbors"] = _pack_array(sensed.neighbors, raw)
        columns["nearest_dx"] = _pack_array(sensed.dx, raw)
        columns["nearest_dy"] = _pack_array(sensed.dy, raw)
        columns["nearest_dist"] = _pack_array(sensed.dist, raw)
        p = self.params
        return {
            "fields": list(VIEW_FIELDS),
            "columns": [columns[name] for name in VIEW_FIELDS],
            "count": len(carriers),
            "world": {"world_width": float(p.width), "world_height": float(p.height)},
            "trait_sets": [list(t) for t in set_index],
            "run": run_names,
        }

    def view(self, entity_id: int) -> dict[str, Any] | None:
        """The entity view (plain JSON-safe dict) of one entity, or None if it is gone."""
        e = self.entities.get(entity_id)
        return None if e is None else self._views([e])[entity_id]

    def trait_batches(self) -> dict[str, list[dict[str, Any]]]:
        """Trait name (sorted) -> views of its carriers, ids ascending.

        The views are fresh on every call; an entity carrying several traits appears as the
        same dict object in each of its traits' lists.
        """
        entities = self.entities
        carriers = [entities[eid] for eid in sorted(entities) if entities[eid].traits]
        views = self._views(carriers)
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

    # -- intents ----------------------------------------------------------------------------

    def _collect_intents(self, intents: Any, rejected: list[tuple[int, str]]) -> dict[int, Any]:
        if intents is None:
            return {}
        if not isinstance(intents, Mapping):
            rejected.append((-1, "bad_intents"))
            return {}
        out: dict[int, Any] = {}
        entities = self.entities
        try:
            items = list(intents.items())
        except Exception:
            rejected.append((-1, "bad_intents"))
            return {}
        for k, v in items:
            if type(k) is not int:
                rejected.append((-1, "bad_entity_id"))
            elif k not in entities:
                rejected.append((k, "dead_entity" if 1 <= k < self._next_entity_id else "unknown_entity"))
            else:
                out[k] = v
        return out

    def _intents_by_entity(self, intents: Any, rejected: list[tuple[int, str]]) -> tuple[dict[int, tuple], set[int], Any]:
        """Check every entity's intents (ids ascending) and apply its ``set`` intents; return
        each entity's last move intent ``(towards, a, b)`` and the ids that asked to eat.

        Setting happens for all entities before anyone moves: a tick's movement, eating,
        metabolism and aging read only the entity's own attributes, so this equals applying
        them entity by entity inside the tick's loop. The third value (None or a dict) holds the
        ids of the entities whose ``Entity`` attributes were set, under ``"touched"`` (a list of
        arrays; see :meth:`_apply_columns` for the rest)."""
        if isinstance(intents, IntentColumns):
            return self._apply_columns(intents, rejected)
        by_entity = self._collect_intents(intents, rejected)
        moves: dict[int, tuple] = {}
        eats: set[int] = set()
        entities = self.entities
        for eid in sorted(by_entity):
            move, eat = self._apply_intents(entities[eid], by_entity[eid], rejected)
            if move is not None:
                moves[eid] = move
            if eat:
                eats.add(eid)
        return moves, eats, {"touched": [np.fromiter(by_entity, dtype=np.int64, count=len(by_entity))]}

    def _apply_columns(self, ic: IntentColumns, rejected: list[tuple[int, str]]) -> tuple[dict[int, tuple], set[int], Any]:
        """:meth:`_intents_by_entity` of columnar intents, with the same result and rejections;
        the bulk's move intents come as columns, ``bulk["moves"] = (ids, towards, a, b)`` (each
        entity's last move, ids unique), besides the dict of the entities checked one by one, and
        its direction sets as ``bulk["direction"] = (ids, values)`` (not yet applied).

        The intents every check would pass unchanged (a finite float for a number or a move, a
        valid string for ``state``, ``eat``) of entities that sent nothing else are applied in
        bulk; an entity with any other intent, or too many, goes through :meth:`_apply_intents`
        with its whole list, so it is rejected (and counted) exactly as in the plain form."""
        moves: dict[int, tuple] = {}
        eats: set[int] = set()
        ids = ic.entity
        if not len(ids):
            return moves, eats, None
        entities = self.entities
        kind = ic.kind
        names = ic.names
        uniq, first, inverse, counts = _group(ids)
        uniq_ids = uniq.tolist()
        alive = np.fromiter(map(entities.__contains__, uniq_ids), dtype=bool, count=len(uniq_ids))
        if not alive.all():  # as _collect_intents: in the order the ids first appear
            next_id = self._next_entity_id
            gone = (~alive).nonzero()[0]
            for j in gone[np.argsort(first[gone])].tolist():
                k = uniq_ids[j]
                rejected.append((k, "dead_entity" if 1 <= k < next_id else "unknown_entity"))
        is_set = kind == KIND_SET
        is_move = (kind != KIND_SET) & (kind != KIND_EAT)  # decode let only s, m, t, e through
        # An intent is plain when it needs no check: a number set to a finite float, a move by
        # finite floats, eat; a state set with a valid string is plain too (found below).
        numeric_name = np.array([nm in _NUMBERS for nm in names] + [False])
        odd = is_set & ~numeric_name[np.where(is_set, ic.attr, len(names))]
        finite_a = np.isfinite(ic.a)
        odd |= (is_set | is_move) & ~finite_a
        odd |= is_move & ~np.isfinite(ic.b)
        state_sets = []
        for i, v in ic.over_a.items():
            if kind[i] == KIND_EAT:
                continue  # eat has no arguments: whatever replaced one is never read
            if (is_set[i] and names[ic.attr[i]] == "state" and type(v) is str
                    and len(v) <= MAX_STATE_LENGTH and v.isprintable()):
                odd[i] = False
                state_sets.append(i)
            else:
                odd[i] = True
        for i in ic.over_b:
            if is_move[i]:
                odd[i] = True
        odd_entity = np.zeros(len(uniq_ids), dtype=bool)
        odd_entity[inverse[odd]] = True
        odd_entity |= counts > self.params.max_intents_per_entity
        plain = (alive & ~odd_entity)[inverse]
        # sets: per attribute, in intent order (the last one wins)
        bulk: dict[str, tuple] = {}
        plain_set = plain & is_set
        touched: list[np.ndarray] = [uniq[alive & odd_entity]]  # whose speed/direction/rate may change
        bulk["touched"] = touched
        # the attributes set (attr is in range for every set: checked by decode_intents)
        used = np.bincount(ic.attr[plain_set], minlength=len(names)).nonzero()[0].tolist()
        for name in sorted({names[j] for j in used} & _NUMBERS.keys()):
            at = [j for j, nm in enumerate(names) if nm == name]
            sel = plain_set & (ic.attr == at[0] if len(at) == 1 else np.isin(ic.attr, at))
            values = ic.a[sel]
            if name == "direction":  # step() takes these as a column (every direction is stored back)
                vals = values.tolist()
                for j in ((values < -_PI) | (values > _PI)).nonzero()[0].tolist():
                    vals[j] = _wrap_angle(vals[j])
                keep = _last_of_each(ids[sel])
                bulk["direction"] = (ids[sel][keep], np.array(vals)[keep])
                continue
            else:
                lo, hi = _NUMBERS[name]
                vals = np.where(values < lo, lo, np.where(values > hi, hi, values)).tolist()
            _SETTERS[name](map(entities.__getitem__, ids[sel].tolist()), vals)
            touched.append(ids[sel])
        for i in sorted(state_sets):
            if plain[i]:
                entities[int(ids[i])].state = ic.over_a[i]
        sel = (plain & is_move).nonzero()[0]
        if len(sel):
            sel = sel[_last_of_each(ids[sel])]  # an entity's last move wins
            bulk["moves"] = (ids[sel], kind[sel] == KIND_TOWARDS, ic.a[sel], ic.b[sel])
        eats.update(ids[plain & (kind == KIND_EAT)].tolist())
        odd_alive = (alive & odd_entity).nonzero()[0]
        if len(odd_alive):
            order = np.argsort(ids, kind="stable")  # each entity's intents stay in order
            ends = np.cumsum(counts)
            for j in odd_alive.tolist():
                eid = uniq_ids[j]
                move, eat = self._apply_intents(entities[eid], ic.lists_of(order[ends[j] - counts[j]:ends[j]]), rejected)
                if move is not None:
                    moves[eid] = move
                if eat:
                    eats.add(eid)
        return moves, eats, bulk

    def _apply_intents(self, e: Entity, lst: Any, rejected: list[tuple[int, str]]) -> tuple[Any, bool]:
        """Apply ``set`` intents to ``e``; return (last move intent or None, eat requested)."""
        eid = e.id
        if type(lst) not in (list, tuple):
            rejected.append((eid, "bad_intent_list"))
            return None, False
        limit = self.params.max_intents_per_entity
        if len(lst) > limit:
            rejected.append((eid, "too_many_intents"))
            lst = lst[:limit]
        move = None
        eat = False
        for it in lst:
            if type(it) not in (list, tuple) or not it or type(it[0]) is not str:
                rejected.append((eid, "malformed_intent"))
                continue
            kind = it[0]
            n = len(it)
            if kind == "set":
                if n != 3:
                    rejected.append((eid, "bad_arity"))
                    continue
                attr = it[1]
                if type(attr) is not str:
                    rejected.append((eid, "malformed_intent"))
                    continue
                spec = _WRITABLE.get(attr)
                if spec is None:
                    rejected.append((eid, "read_only_attr" if attr in READABLE_ATTRS else "unknown_attr"))
                    continue
                value = it[2]
                if spec[0] == "str":
                    if type(value) is not str:
                        rejected.append((eid, "bad_type"))
                    elif len(value) > MAX_STATE_LENGTH or not value.isprintable():
                        rejected.append((eid, "bad_state"))
                    else:
                        setattr(e, attr, value)
                    continue
                v = _check_number(value)
                if type(v) is str:
                    rejected.append((eid, v))
                    continue
                if attr == "direction":
                    e.direction = _wrap_angle(v)
                else:
                    lo = spec[1]
                    hi = spec[2]
                    if v < lo:
                        v = lo
                    elif v > hi:
                        v = hi
                    setattr(e, attr, float(v))
            elif kind == "move" or kind == "move_towards":
                if n != 3:
                    rejected.append((eid, "bad_arity"))
                    continue
                a = _check_number(it[1])
                b = _check_number(it[2])
                if type(a) is str or type(b) is str:
                    rejected.append((eid, a if type(a) is str else b))
                    continue
                move = (kind == "move_towards", a, b)
            elif kind == "eat":
                if n != 1:
                    rejected.append((eid, "bad_arity"))
                    continue
                eat = True
            else:
                rejected.append((eid, "unknown_kind"))
        return move, eat

    # -- the tick ---------------------------------------------------------------------------

    def prepare_step(self) -> None:
        """Read ahead what the next :meth:`step` reads whatever the intents are (the entities in
        id order, their columns, the resource layout of eating) — for the engine to call while
        the trait host computes this tick's intents, so that this work overlaps the host's.

        ``step`` uses it only for the same tick and if no entity was added or removed since;
        the speed, direction and rate of the entities that intents set are read again. Nothing
        else may change an entity's numbers in between (they are changed only by ``World``).
        The last step's numbers are stored into the entities here, off the tick's path."""
        self._write_back()
        self._prepared = self._step_columns()
        if self.resources:
            self._resource_near_layout()

    def _step_columns(self) -> tuple:
        """(tick, the kept columns, entities in id order, ids, world columns, direction, rate,
        speed) as :meth:`step` reads them."""
        entities = self.entities
        keys = sorted(entities)
        order = [entities[eid] for eid in keys]
        n = len(order)
        ids = np.array(keys, dtype=np.int64)
        cols = self._cached_columns(ids)
        if cols is None:
            cols = {name: np.fromiter(map(attrgetter(name), order), dtype=dtype, count=n)
                    for name, dtype in _WORLD_COLUMNS}
        # copies: step() changes them in place (intents, movement)
        direction, rate, speed = (cols[name].copy() for name in ("direction", "energy_consumption_rate", "speed"))
        return self.tick, self._columns, order, ids, cols, direction, rate, speed

    def step(self, intents: Mapping[int, Sequence[Sequence[Any]]] | None = None,
             lazy_write_back: bool = False) -> TickReport:
        """Advance one tick, applying (checked) intents. Never raises on bad intents.

        ``lazy_write_back``: leave the new numbers of the entities that neither died nor
        reproduced in the world's columns until the entities are next read (``entities``,
        :meth:`prepare_step`, the next step) rather than storing them into every ``Entity`` now
        (~3 ms at 5,000 entities). Only for a caller that reads entities through the world, as
        the engine does: an ``Entity`` object held from before shows its old numbers until then.

        Movement, eating, metabolism, aging and collisions run over numpy columns of every
        entity (ids ascending) with the float operations of the per-entity rules, in the same
        order, and ``math``'s cos/sin/hypot/atan2 applied element by element (numpy's own may
        differ in the last bit from one CPU to another); so the result does not depend on
        vectorising. Only eaters that find a resource, births and deaths go entity by entity."""
        p = self.params
        tick = self.tick
        rng = self._rng(tick)
        rnd = rng.random
        report = TickReport(tick=tick)
        rejected = report.rejected_intents
        self._write_back()  # before intents set attributes (unless prepare_step did it)
        moves, eats, bulk = self._intents_by_entity(intents, rejected)
        bulk_moves = bulk.get("moves") if bulk else None

        entities = self.entities
        width_max = self._xmax
        height_max = self._ymax
        prepared, self._prepared = self._prepared, None
        early = (prepared is not None and prepared[0] == tick and prepared[1] is not None
                 and prepared[1] is self._columns)
        if not early:
            prepared = self._step_columns()
        _, _, order, ids, cols, direction, rate, speed = prepared
        n = len(order)
        if bulk and bulk.get("touched"):  # the columns are from before the intents: refresh what they set
            at = np.searchsorted(ids, np.unique(np.concatenate(bulk["touched"]))).tolist()
            for name, col in (("direction", direction), ("energy_consumption_rate", rate), ("speed", speed)):
                get = attrgetter(name)
                col[at] = [get(order[i]) for i in at]
        x = cols["x"]
        y = cols["y"]
        if bulk and "direction" in bulk:
            set_ids, values = bulk["direction"]
            direction[np.searchsorted(ids, set_ids)] = values
        energy = cols["energy"].copy()
        max_energy = cols["max_energy"]
        # (1) intents were applied above; (2) movement.
        cap = np.where(rate < 1.0, MAX_SPEED * rate, MAX_SPEED)
        sp = np.where(speed > cap, cap, speed)
        nx = x.copy()
        ny = y.copy()
        moving = np.zeros(n, dtype=bool)
        if moves or bulk_moves is not None:
            towards = np.zeros(n, dtype=bool)
            a = np.zeros(n)
            b = np.zeros(n)
            if bulk_moves is not None:  # ids unique, none of them in ``moves``
                at = np.searchsorted(ids, bulk_moves[0])
                moving[at] = True
                towards[at], a[at], b[at] = bulk_moves[1:]
            if moves:
                at = np.searchsorted(ids, np.fromiter(moves, dtype=np.int64, count=len(moves)))
                moving[at] = True
                vals = list(moves.values())
                towards[at] = [m[0] for m in vals]
                a[at] = [m[1] for m in vals]
                b[at] = [m[2] for m in vals]
            self._move_by_intent(moving.nonzero()[0], towards, a, b, x, y, sp, nx, ny, direction)
        wander = (~moving).nonzero()[0]
        if len(wander):
            # Instinct: wander with a small random turn (one draw per wanderer, ids ascending),
            # bouncing off the walls.
            draws = np.array([rnd() for _ in range(len(wander))])
            d = direction[wander] + (draws * 2.0 - 1.0) * p.wander_turn
            d = np.where(d > _PI, d - _TWO_PI, np.where(d < -_PI, d + _TWO_PI, d))
            dl = d.tolist()
            wx = x[wander] + np.fromiter(map(math.cos, dl), np.float64, len(dl)) * sp[wander]
            wy = y[wander] + np.fromiter(map(math.sin, dl), np.float64, len(dl)) * sp[wander]
            out_x = (wx < 0.0) | (wx > width_max)
            if out_x.any():
                wx = np.where(out_x, np.where(wx < 0.0, 0.0, width_max), wx)
                bounced = _PI - d
                d = np.where(out_x, np.where(bounced > _PI, bounced - _TWO_PI, bounced), d)
            out_y = (wy < 0.0) | (wy > height_max)
            if out_y.any():
                wy = np.where(out_y, np.where(wy < 0.0, 0.0, height_max), wy)
                d = np.where(out_y, -d, d)
            nx[wander] = wx
            ny[wander] = wy
            direction[wander] = d
        moved = np.fromiter(map(math.hypot, (nx - x).tolist(), (ny - y).tolist()), np.float64, n)

        # (3) eating: the nearest resource within eat_radius (ties by lower id), eaters by
        # ascending id, each taking what is left; (4) metabolism.
        resources = self.resources
        if resources:
            eater = energy < p.hunger_fraction * max_energy
            if eats:
                eater[np.searchsorted(ids, np.fromiter(eats, dtype=np.int64, count=len(eats)))] = True
            self._eat(eater.nonzero()[0], nx, ny, energy, max_energy)
        energy = energy - p.base_metabolism * rate - p.move_cost * moved
        # (6) aging
        age = cols["age"] + 1

        # (5) collisions: every pair closer than collision_radius, each pair once.
        pre_collision: dict[int, float] = {}
        cr = p.collision_radius
        dmg = p.collision_damage
        if cr > 0.0 and dmg > 0.0 and n > 1:
            lo, hi = close_pairs(Layout(self._near_grid, nx, ny, ids), cr)
            if len(lo):
                hits = np.bincount(np.concatenate([lo, hi]), minlength=n)
                hit = hits.nonzero()[0]
                pre_collision = dict(zip(ids[hit].tolist(), energy[hit].tolist()))
                for k in range(int(hits.max())):  # one subtraction per pair, as pair by pair
                    energy = np.where(hits > k, energy - dmg, energy)
                self._collisions += len(lo)

        # (7) births and (8) deaths. Dying entities never reproduce; newborns are not in
        # ``order``, so they neither die nor reproduce in the tick they are born.
        threshold = p.reproduction_threshold
        maturity = p.maturity_age
        cost = p.reproduction_cost
        child_energy = cost * p.birth_energy_fraction
        offset = 2.0 * cr + 1.0
        room = p.max_population - n
        max_age = cols["max_age"]
        notable = (energy <= 0.0) | (age >= max_age) | ((energy >= threshold) & (age >= maturity))
        # The entities read below get this tick's numbers now; the others when next read.
        at = notable.nonzero()[0]
        _store_numbers([order[i] for i in at.tolist()], nx[at], ny[at], direction[at], energy[at], age[at])
        dead: list[tuple[Entity, str]] = []
        dead_at: list[int] = []
        parents: list[int] = []
        for i in notable.nonzero()[0].tolist():
            e = order[i]
            if e.energy <= 0.0:
                dead_at.append(i)
                pre = pre_collision.get(e.id)
                dead.append((e, "collision" if pre is not None and pre > 0.0 else "starvation"))
            elif e.age >= e.max_age:
                dead_at.append(i)
                dead.append((e, "age"))
            elif e.energy >= threshold and e.age >= maturity and room > 0:
                room -= 1
                e.energy -= cost
                parents.append(i)
                angle = rnd() * _TWO_PI - _PI
                bx = e.x + math.cos(angle) * offset
                by = e.y + math.sin(angle) * offset
                cid = self._next_entity_id
                self._next_entity_id += 1
                child = Entity(
                    id=cid,
                    x=min(max(bx, 0.0), width_max),
                    y=min(max(by, 0.0), height_max),
                    energy=min(child_energy, e.max_energy),
                    max_energy=e.max_energy,
                    speed=e.speed,
                    direction=angle,
                    age=0,
                    max_age=self._new_max_age(rng),
                    state="",
                    traits=e.traits,
                    energy_consumption_rate=e.energy_consumption_rate,
                    generation=e.generation + 1,
                    parent_id=e.id,
                )
                gen = self._rng(f"dna:{cid}")
                child.dna = self._mutate_dna(e.dna, gen)
                if e.traits:
                    tb = self._trait_births
                    for name in e.traits:
                        tb[name] = tb.get(name, 0) + 1
                self._give_new_trait(child, gen, report)
                entities[cid] = child
                report.births.append(cid)
        self._births += len(report.births)

        deaths = report.deaths
        counts = self._deaths
        trait_deaths = self._trait_deaths
        for e, cause in dead:
            del entities[e.id]
            deaths.append((e.id, cause))
            counts[cause] += 1
            for name in e.traits:
                by_cause = trait_deaths.get(name)
                if by_cause is None:
                    by_cause = trait_deaths[name] = {c: 0 for c in DEATH_CAUSES}
                by_cause[cause] += 1

        # Population floor (off by default).
        while len(entities) < p.min_population:
            fresh = self._spawn_fresh(rng)
            self._give_new_trait(fresh, self._rng(f"trait:{fresh.id}"), report)
            report.respawned.append(fresh.id)
        self._respawns += len(report.respawned)
        if parents:
            energy[parents] = [order[i].energy for i in parents]
        after = {"id": ids, "x": nx, "y": ny, "energy": energy, "max_energy": max_energy, "age": age,
                 "max_age": max_age, "generation": cols["generation"], "speed": speed, "direction": direction,
                 "energy_consumption_rate": rate}
        if dead_at or report.births or report.respawned:
            keep = np.ones(n, dtype=bool)
            keep[dead_at] = False
            new = [entities[i] for i in report.births + report.respawned]
            after = {name: np.concatenate([after[name][keep],
                                           np.fromiter(map(attrgetter(name), new), dtype=dtype, count=len(new))])
                     for name, dtype in _WORLD_COLUMNS}
        self._columns = after
        self._positions = Layout(self._grid, after["x"], after["y"], after["id"])
        self._unwritten = (order, nx, ny, direction, energy, age)
        if not lazy_write_back:
            self._write_back()

        # (9) resource respawn.
        if len(resources) < p.max_resources and rnd() < p.resource_spawn_chance:
            self._spawn_resource(rng)

        if rejected:
            counter = self._rejected
            for _, reason in rejected:
                counter[reason] = counter.get(reason, 0) + 1

        # (10)
        self.tick = tick + 1
        return report

    def _move_by_intent(self, idx: np.ndarray, towards: np.ndarray, a: np.ndarray, b: np.ndarray, x: np.ndarray,
                        y: np.ndarray, sp: np.ndarray, nx: np.ndarray, ny: np.ndarray, direction: np.ndarray) -> None:
        """Movement of the entities at ``idx`` by their move intent: along (a, b), or towards
        the point (a, b) without overshooting, at most ``sp``; clamped into the world."""
        tw = towards[idx]
        px = x[idx]
        py = y[idx]
        dx = np.where(tw, a[idx] - px, a[idx])
        dy = np.where(tw, b[idx] - py, b[idx])
        ax = np.abs(dx)
        ay = np.abs(dy)
        m = np.where(ay > ax, ay, ax)
        go = m > 0.0  # a zero vector: the entity stays and keeps its direction
        idx, tw, px, py, dx, dy, m = idx[go], tw[go], px[go], py[go], dx[go], dy[go], m[go]
        ux = dx / m
        uy = dy / m
        uxl = ux.tolist()
        uyl = uy.tolist()
        h = np.fromiter(map(math.hypot, uxl, uyl), np.float64, len(uxl))
        dist = sp[idx]
        full = m * h
        dist = np.where(tw & (full < dist), full, dist)
        step = dist > 0.0
        mx = np.where(step, px + ux / h * dist, px)
        my = np.where(step, py + uy / h * dist, py)
        mx = np.where(mx < 0.0, 0.0, np.where(mx > self._xmax, self._xmax, mx))
        my = np.where(my < 0.0, 0.0, np.where(my > self._ymax, self._ymax, my))
        nx[idx] = np.where(step, mx, px)
        ny[idx] = np.where(step, my, py)
        direction[idx] = np.fromiter(map(math.atan2, uyl, uxl), np.float64, len(uxl))

    def _eat(self, eaters: np.ndarray, nx: np.ndarray, ny: np.ndarray, energy: np.ndarray,
             max_energy: np.ndarray) -> None:
        """Eaters (indices, ids ascending) at (nx, ny) take the nearest resource within
        eat_radius that is still there; ``energy`` gains it, up to ``max_energy``."""
        if not len(eaters):
            return
        resources = self.resources
        lay = self._resource_near_layout()
        eat_r = self.params.eat_radius
        found, _, _ = nearest(nx[eaters], ny[eaters], lay, eat_r)
        hit = found >= 0
        if not hit.any():
            return
        rgrid = self._rgrid
        rids = found[hit].tolist()
        eaten: list[int] = []
        for i, rid in zip(eaters[hit].tolist(), rids):
            res = resources.get(rid)
            if res is None:  # an eater with a lower id took it: the nearest of what is left
                if not resources:
                    break
                near = rgrid.nearest(float(nx[i]), float(ny[i]), eat_r)
                if near is None:
                    continue
                res = near[0]
            gained = energy[i] + res.energy
            energy[i] = max_energy[i] if gained > max_energy[i] else gained
            rgrid.remove(res)
            del resources[res.id]
            eaten.append(res.id)
        self._resources_changed()
        if self._resource_columns is not None and eaten:
            ids = self._resource_columns[0]
            keep = np.ones(len(ids), dtype=bool)
            keep[np.searchsorted(ids, eaten)] = False
            self._resource_columns = tuple(col[keep] for col in self._resource_columns)

    # -- inspection -------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        entities = self.entities
        n = len(entities)
        usage: dict[str, int] = {}
        energy_by_trait: dict[str, float] = {}
        total = 0.0
        for eid in sorted(entities):
            e = entities[eid]
            total += e.energy
            for name in e.traits:
                usage[name] = usage.get(name, 0) + 1
                energy_by_trait[name] = energy_by_trait.get(name, 0.0) + e.energy
        names = set(usage) | set(self.available_traits) | set(self._trait_births)
        names |= set(self._trait_deaths) | set(self._trait_gains)
        no_deaths = {c: 0 for c in DEATH_CAUSES}
        trait_stats = {
            name: {
                "carriers": usage.get(name, 0),
                "avg_energy": energy_by_trait[name] / usage[name] if name in usage else 0.0,
                "births": self._trait_births.get(name, 0),
                "deaths": dict(self._trait_deaths.get(name, no_deaths)),
                "gained": self._trait_gains.get(name, 0),
            }
            for name in sorted(names)
        }
        p = self.params
        return {
            "tick": self.tick,
            "population": n,
            "avg_energy": total / n if n else 0.0,
            "resource_count": len(self.resources),
            "resource_density": len(self.resources) / p.max_resources if p.max_resources else 0.0,
            "deaths": dict(self._deaths),
            "births": self._births,
            "respawns": self._respawns,
            "collisions": self._collisions,
            "trait_usage": {name: usage[name] for name in sorted(usage)},
            "trait_stats": trait_stats,
            "available_traits": list(self.available_traits),
            "rejected_intents": {r: self._rejected[r] for r in sorted(self._rejected)},
        }

    def state_hash(self) -> str:
        """sha256 hex of the exact state: tick, available traits, then entities and resources
        (ids ascending) as one little-endian binary column per field (float64 bit patterns with
        -0.0 as 0.0, int64) plus every entity's state and traits as text. Exact bits rather than
        rounded text: a snapshot round-trips floats exactly, and packing columns costs a
        fraction of formatting every number (this runs inside a snapshot tick)."""
        digest = hashlib.sha256()
        ents = self.entities
        order = [ents[i] for i in sorted(ents)]
        res = self.resources
        rorder = [res[i] for i in sorted(res)]
        digest.update(json.dumps([self.tick, list(self.available_traits), len(order), len(rorder)]).encode())

        def ints(values: Any, count: int) -> None:
            digest.update(np.fromiter(values, dtype="<i8", count=count).tobytes())

        def floats(values: Any, count: int) -> None:
            # + 0.0 turns -0.0 into 0.0: states the physics cannot tell apart hash the same.
            digest.update((np.fromiter(values, dtype=np.float64, count=count) + 0.0).astype("<f8").tobytes())

        n = len(order)
        for name in _HASH_INT_FIELDS:
            ints(map(attrgetter(name), order), n)
        ints((-1 if e.parent_id is None else e.parent_id for e in order), n)
        for name in _HASH_FLOAT_FIELDS:
            floats(map(attrgetter(name), order), n)
        pad = (-1.0,) * DNA_GENES
        floats(chain.from_iterable(e.dna if len(e.dna) == DNA_GENES else pad for e in order), n * DNA_GENES)
        # state and trait names hold no control characters (states are checked printable, trait
        # names snake_case), so the unit/record separators delimit them unambiguously.
        digest.update("\x1e".join([e.state + "\x1f" + "\x1f".join(e.traits) for e in order]).encode(
            "utf-8", "backslashreplace"))
        ints(map(attrgetter("id"), rorder), len(rorder))
        for name in ("x", "y", "energy"):
            floats(map(attrgetter(name), rorder), len(rorder))
        return digest.hexdigest()

    # -- save / resume ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume this world exactly (plain JSON-safe data)."""
        return {
            "version": 2,
            "params": asdict(self.params),
            "seed": self.seed,
            "tick": self.tick,
            "next_entity_id": self._next_entity_id,
            "next_resource_id": self._next_resource_id,
            "counters": {
                "deaths": dict(self._deaths),
                "births": self._births,
                "respawns": self._respawns,
                "collisions": self._collisions,
                "rejected_intents": {r: self._rejected[r] for r in sorted(self._rejected)},
                "trait_births": {t: self._trait_births[t] for t in sorted(self._trait_births)},
                "trait_deaths": {t: dict(self._trait_deaths[t]) for t in sorted(self._trait_deaths)},
                "trait_gains": {t: self._trait_gains[t] for t in sorted(self._trait_gains)},
            },
            "available_traits": list(self.available_traits),
            "entities": [
                {
                    "id": e.id, "x": e.x, "y": e.y, "energy": e.energy, "max_energy": e.max_energy,
                    "speed": e.speed, "direction": e.direction, "age": e.age, "max_age": e.max_age,
                    "state": e.state, "traits": list(e.traits),
                    "energy_consumption_rate": e.energy_consumption_rate,
                    "generation": e.generation, "parent_id": e.parent_id, "dna": list(e.dna),
                }
                for e in (self.entities[i] for i in sorted(self.entities))
            ],
            "resources": [
                {"id": r.id, "x": r.x, "y": r.y, "energy": r.energy}
                for r in (self.resources[i] for i in sorted(self.resources))
            ],
        }

    @classmethod
    def from_snapshot(cls, snap: Mapping[str, Any]) -> World:
        """Rebuild a world from :meth:`snapshot` output (trusted data: our own snapshots)."""
        params = WorldParams(**snap["params"])
        w = cls.__new__(cls)
        w.params = params
        w.seed = int(snap["seed"])
        w.tick = int(snap["tick"])
        w._next_entity_id = int(snap["next_entity_id"])
        w._next_resource_id = int(snap["next_resource_id"])
        c = snap["counters"]
        w._deaths = {cause: int(c["deaths"].get(cause, 0)) for cause in DEATH_CAUSES}
        w._births = int(c["births"])
        w._respawns = int(c["respawns"])
        w._collisions = int(c["collisions"])
        w._rejected = {str(k): int(v) for k, v in c["rejected_intents"].items()}
        w._trait_births = {str(k): int(v) for k, v in c.get("trait_births", {}).items()}
        w._trait_deaths = {
            str(k): {cause: int(v.get(cause, 0)) for cause in DEATH_CAUSES}
            for k, v in c.get("trait_deaths", {}).items()
        }
        w._trait_gains = {str(k): int(v) for k, v in c.get("trait_gains", {}).items()}
        w.set_available_traits([str(t) for t in snap.get("available_traits", [])])
        w._set_bounds(params)
        w.entities = {}
        for d in sorted(snap["entities"], key=lambda d: d["id"]):
            e = Entity(
                id=int(d["id"]), x=float(d["x"]), y=float(d["y"]), energy=float(d["energy"]),
                max_energy=float(d["max_energy"]), speed=float(d["speed"]),
                direction=float(d["direction"]), age=int(d["age"]), max_age=int(d["max_age"]),
                state=str(d["state"]), traits=tuple(str(t) for t in d["traits"]),
                energy_consumption_rate=float(d["energy_consumption_rate"]),
                generation=int(d["generation"]),
                parent_id=None if d["parent_id"] is None else int(d["parent_id"]),
                dna=tuple(float(g) for g in d.get("dna", ())),
            )
            w.entities[e.id] = e
        w.resources = {}
        w._rgrid = SpatialGrid(params.width, params.height, params.sense_radius)
        for d in sorted(snap["resources"], key=lambda d: d["id"]):
            r = Resource(id=int(d["id"]), x=float(d["x"]), y=float(d["y"]), energy=float(d["energy"]))
            w.resources[r.id] = r
            w._rgrid.insert(r)
        return w

