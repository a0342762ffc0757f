"""The pure world core: Molbots, resources and one deterministic tick (:class:`World`).

No I/O, no asyncio, no wall clock. Behaviour from traits arrives as *intents* (plain, untrusted
data produced by the trait host) which :meth:`World.step` checks against the Entity API and
applies (``engine.core.intents``); anything malformed is rejected and counted by reason, never raised.

One tick, in this order (each phase is one call in :meth:`World.step`): intents -> movement ->
eating -> metabolism and aging -> collisions -> births -> deaths -> population floor -> the
world's columns kept -> resource respawn -> tick + 1. Movement, eating, metabolism, aging and
collisions only touch the entity itself (eating takes resources lowest id first), so they run
over numpy columns of all entities at once (``engine.core.physics``); the result is bit-identical to
running them entity by entity, phase by phase.

Determinism: every tick draws from one ``random.Random`` derived from ``(seed, tick)``,
entities are processed in ascending id order, resources are picked by (distance, id), and
nothing iterates over a set or depends on string hashing. DNA and trait choices draw from a
stream derived from (seed, entity id), so they never shift the tick's physics stream. Same seed +
same intents gives the same :meth:`World.state_hash`; :meth:`World.snapshot` /
:meth:`World.from_snapshot` let a world be saved and resumed (replay from a snapshot reproduces
the hash).

The spatial layouts (``engine.core.sensing``) and the columns of world-owned numbers (position,
energy, max_energy, age, max_age, generation, kept between ticks) are kept current by the
world: change those only through :meth:`World.step`, :meth:`World.add_entity` and
:meth:`World.add_resource`, never by assigning to an Entity.

Where the rest lives: the data types in ``engine.core.model``, new entities and what newborns inherit
(DNA, traits) in ``engine.core.spawning``, what traits see in ``engine.core.views``, the snapshot format and
the state hash in ``engine.core.world_state``.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import asdict
from itertools import compress
from operator import attrgetter
from typing import Any

import numpy as np
import numpy.ma  # np.unique imports it at first use (~0.1 s): here at start, not on a live tick

from genesis.trait_wire import IntentColumns

from . import world_state
from .intents import REJECT_REASONS, CheckedIntents, apply_intents, override_intents
from .model import DEATH_CAUSES, Counters, Entity, Resource, TickReport, WorldParams
from .physics import TickColumns, collide, eat, eaters, metabolise_and_age, move
from .sensing import Grid, Layout, Sensed, sense, two_steps_pay
from .spatial import SpatialGrid
from .spawning import DNA_GENES, fresh_entity, new_trait, newborn, placed_entity, trait_gene
from .state_digest import ConstantColumns, Digest, StateColumns, TextCodes, digest
from .views import (
    VIEW_ATTR_COLUMNS,
    VIEW_FIELDS,
    batches_by_trait,
    carriers_to_run,
    decode_views,
    entity_views,
    pack_views,
)

__all__ = [
    "DEATH_CAUSES",
    "DNA_GENES",
    "REJECT_REASONS",
    "VIEW_FIELDS",
    "Entity",
    "IntentColumns",
    "Resource",
    "TickReport",
    "World",
    "WorldParams",
    "decode_views",
    "trait_gene",
]

# Entity numbers that only World.step changes, intents included (kept as columns between ticks,
# World._columns).
_WORLD_COLUMNS = (
    ("id", np.int64),
    ("x", np.float64),
    ("y", np.float64),
    ("energy", np.float64),
    ("max_energy", np.float64),
    ("age", np.int64),
    ("max_age", np.int64),
    ("generation", np.int64),
    ("speed", np.float64),
    ("direction", np.float64),
    ("energy_consumption_rate", np.float64),
)
_X = attrgetter("x")
_Y = attrgetter("y")
_ID = attrgetter("id")


def _store_numbers(
    ents: list[Entity], x: np.ndarray, y: np.ndarray, direction: np.ndarray, energy: np.ndarray, age: np.ndarray
) -> None:
    """A step's new numbers into its entities (the columns in the entities' order)."""
    for e, ex, ey, ed, en, ag in zip(ents, x.tolist(), y.tolist(), direction.tolist(), energy.tolist(), age.tolist()):
        e.x = ex
        e.y = ey
        e.direction = ed
        e.energy = en
        e.age = ag


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
        self._counters = Counters()
        self.available_traits: tuple[str, ...] = ()
        self._trait_genes: dict[str, int] = {}
        self.members: dict[int, int] = {}  # an agent's member id -> the entity that is its body
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
        # Every entity's / resource's position laid out by cell (engine/core/sensing.py), rebuilt
        # when None: step() leaves the entities' when nobody was born or died; adding a
        # resource or eating one drops the resources'.
        self._grid = Grid.over(params.width, params.height, params.sense_radius)
        # A finer grid for the short-range queries (collisions, eating): a 3x3 block of sense-radius
        # cells holds ~10x more candidates than they need. At most ~250,000 cells.
        near = max(
            params.collision_radius,
            params.eat_radius,
            params.sense_radius / 4.0,
            math.sqrt(params.width * params.height / 250_000.0),
        )
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
        # (_columns, the entities in their order) as step() left them: valid while _columns is
        # that same object (every change of who lives replaces or drops _columns)
        self._column_order: tuple[dict[str, np.ndarray], list[Entity]] | None = None
        # What step(lazy_write_back=True) computed and has not yet stored into the Entity objects:
        # (entities, x, y, direction, energy, age). Storing 5 numbers into each of 5,000 objects
        # costs 1.5-3 ms; the next step reads the columns instead, so the engine and replay leave
        # it to whoever reads the entities next (``entities``: telemetry, status, rounds).
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

    def _ordered_columns(self) -> tuple[dict[str, np.ndarray], list[Entity]] | None:
        """:attr:`_columns` and the entities in their order, if they are still every entity's."""
        kept = self._column_order
        if kept is None or kept[0] is not self._columns or len(kept[1]) != len(self._entities):
            return None
        return kept

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
                self._resource_columns = (
                    np.fromiter(map(_ID, res), dtype=np.int64, count=len(res)),
                    np.fromiter(map(_X, res), dtype=np.float64, count=len(res)),
                    np.fromiter(map(_Y, res), dtype=np.float64, count=len(res)),
                )
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

    def _new_entity_id(self) -> int:
        eid = self._next_entity_id
        self._next_entity_id += 1
        return eid

    def _spawn_fresh(self, rng: random.Random) -> Entity:
        eid = self._new_entity_id()
        e = fresh_entity(eid, self.params, self._xmax, self._ymax, rng, self._rng(f"dna:{eid}"))
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
        e = placed_entity(self._next_entity_id, x, y, attrs, self.params, self._xmax, self._ymax)
        self._next_entity_id += 1  # only once the entity is valid
        self.entities[e.id] = e
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
            ids, xs, ys = self._resource_columns
            self._resource_columns = (np.append(ids, rid), np.append(xs, r.x), np.append(ys, r.y))
        return r

    # -- traits -----------------------------------------------------------------------------

    def embody(self, member_id: int) -> int:
        """The entity that is ``member_id``'s body: the living one it has, or a fresh Molbot."""
        body = self.members.get(member_id)
        if body is not None and body in self._entities:
            return body
        e = self._spawn_fresh(self._rng(f"embody:{member_id}"))
        self.members[member_id] = e.id
        return e.id

    def set_energies(self, energy: Mapping[int, float]) -> None:
        """New energy of some entities outside a step (a round's sharing and attacks); the
        columns kept between ticks are read again from the entities."""
        ents = self.entities
        for eid, value in energy.items():
            ents[eid].energy = value
        self._columns = None

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

    def _give_new_trait(self, e: Entity, rng: random.Random, report: TickReport) -> None:
        """Maybe one new available trait for the new entity ``e`` (``engine.core.spawning``)."""
        name = new_trait(e, self.available_traits, self._trait_genes, self.params, rng)
        if name is not None:
            e.traits = e.traits + (name,)
            gains = self._counters.trait_gains
            gains[name] = gains.get(name, 0) + 1
            report.gained.append((e.id, name))

    # -- views ------------------------------------------------------------------------------

    def _sense(self, ents: list[Entity]) -> Sensed:
        """Neighbour counts and nearest resources of ``ents`` (engine/core/sensing.py)."""
        n = len(ents)
        qx = np.fromiter(map(_X, ents), dtype=np.float64, count=n)
        qy = np.fromiter(map(_Y, ents), dtype=np.float64, count=n)
        return sense(
            qx,
            qy,
            self._entity_layout(),
            self._resource_layout(),
            self.params.sense_radius,
            near_resources=self._near_resources_for(n),
        )

    def _sensed_by_id(self, ents: list[Entity]) -> dict[int, tuple[int, list[float] | None]]:
        """(neighbour count, nearest resource as [dx, dy, distance] or None) for ``ents``, by id."""
        sensed = self._sense(ents)
        out: dict[int, tuple[int, list[float] | None]] = {}
        for e, n, dx, dy, d in zip(
            ents, sensed.neighbors.tolist(), sensed.dx.tolist(), sensed.dy.tolist(), sensed.dist.tolist()
        ):
            out[e.id] = (n, None if dx != dx else [dx, dy, d])
        return out

    def trait_views(self, run: Sequence[str] | None = None, raw: bool = False) -> dict[str, Any]:
        """The carriers' views in the compact form of the trait host's ``views`` request.

        Each carrier appears once however many traits it carries, ids ascending, as one column
        per name of ``VIEW_FIELDS`` (``fields``): numbers as base64 of little-endian float64
        (``{"f8": ...}``), int32 (``{"i4": ...}``, ints that fit) or int64 (``{"i8": ...}``)
        arrays, ``state`` as a JSON list; a column whose rows all hold the same value is sent as
        ``{"same": value}`` (see ``engine.core.views.pack_array``). ``traits``
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
        run_names, carriers, carried, set_index = carriers_to_run(entities, run)
        n = len(carriers)
        values = self._view_columns(carriers)
        # every entity a carrier: the layout's points are the queries (entities are kept in id order)
        sensed = sense(
            values["x"],
            values["y"],
            self._entity_layout(),
            self._resource_layout(),
            self.params.sense_radius,
            everyone=n == len(entities),
            near_resources=self._near_resources_for(n),
        )
        return pack_views(run_names, carriers, carried, set_index, values, sensed, self.params, raw)

    def _view_columns(self, carriers: list[Entity]) -> dict[str, np.ndarray]:
        """The ``VIEW_ATTR_COLUMNS`` of ``carriers`` (ids ascending): taken from the world's
        columns where they hold them, else read from the entities."""
        entities = self._entities
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
        if any(name not in values for name, _ in VIEW_ATTR_COLUMNS):  # read from the entities below
            self._write_back()
        for name, dtype in VIEW_ATTR_COLUMNS:
            if name not in values:
                values[name] = np.fromiter(map(attrgetter(name), carriers), dtype=dtype, count=n)
        return values

    def _views(self, ents: list[Entity]) -> dict[int, dict[str, Any]]:
        """Entity views (plain JSON-safe dicts) for ``ents``, keyed by id."""
        return entity_views(ents, self._sensed_by_id(ents), self.params)

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
        return batches_by_trait(carriers, self._views(carriers))

    # -- the tick ---------------------------------------------------------------------------

    def prepare_step(self) -> None:
        """Build what the next :meth:`step` needs whatever the intents are (the resources' layout
        for eating) — for the engine to call while the trait host computes this tick's intents,
        so that this work overlaps the host's."""
        if self.resources:
            self._resource_near_layout()

    def _read_columns(self, stale: tuple | None = None) -> TickColumns:
        """The columns of every entity as the tick starts (before its intents): the world's own,
        else read from the entities (once ``stale``, numbers not yet stored into them, are)."""
        kept = self._ordered_columns()
        if kept is not None:
            return TickColumns.of(kept[1], kept[0]["id"], kept[0])
        if stale is not None:
            _store_numbers(*stale)
        entities = self.entities
        keys = sorted(entities)
        order = [entities[eid] for eid in keys]
        n = len(order)
        cols = {name: np.fromiter(map(attrgetter(name), order), dtype=dtype, count=n) for name, dtype in _WORLD_COLUMNS}
        return TickColumns.of(order, np.array(keys, dtype=np.int64), cols)

    def step(
        self,
        intents: Mapping[int, Sequence[Sequence[Any]]] | IntentColumns | None = None,
        lazy_write_back: bool = False,
        forced: Mapping[int, Sequence[Sequence[Any]]] | None = None,
    ) -> TickReport:
        """Advance one tick, applying (checked) intents. Never raises on bad intents.

        ``intents``: ``{entity_id: [intent, ...]}`` or the trait host's decoded
        :class:`IntentColumns` (see ``engine.core.intents``).

        ``lazy_write_back``: leave the new numbers of the entities that neither died nor
        reproduced in the world's columns until the entities are next read (``entities``)
        rather than storing them into every ``Entity`` now (1.5-3 ms at 5,000 entities); the
        next step reads the columns. Only for a caller that reads entities through the world, as
        the engine and replay do: an ``Entity`` object held from before shows its old numbers
        until then.

        ``forced``: movement and eating intents (``{entity_id: [intent, ...]}``) that replace
        the entities' own for this tick (a settled round's, ``engine.core.round_rules``)."""
        p = self.params
        tick = self.tick
        rng = self._rng(tick)  # wanderers, births, the floor and respawn draw from it in this order
        report = TickReport(tick=tick)
        # The last step's numbers not yet stored into the entities are in the world's columns, which
        # this step reads instead (the entities it reads, it stores its new numbers into first).
        stale, self._unwritten = self._unwritten, None
        checked = apply_intents(
            intents, self.entities, self._next_entity_id, p.max_intents_per_entity, report.rejected_intents
        )
        if forced:
            checked = override_intents(
                checked,
                apply_intents(forced, self.entities, self._next_entity_id, p.max_intents_per_entity, []),
            )
        c = self._tick_columns(checked, stale)
        moved = move(c, checked, rng.random, p.wander_turn, self._xmax, self._ymax)
        self._eat(c, checked.eats)
        metabolise_and_age(c, moved, p)
        hit_before = self._collide(c)
        dead, parents = self._reproduce_or_die(c, hit_before, rng, report)
        self._remove_dead(dead, report)
        self._keep_population_floor(rng, report)
        self._keep_columns(c, dead, parents, report, lazy_write_back)
        self._respawn_resource(rng)
        self._count_rejections(report.rejected_intents)
        self.tick = tick + 1
        return report

    def _tick_columns(self, checked: CheckedIntents, stale: tuple | None) -> TickColumns:
        """The tick's columns, with what the intents set."""
        c = self._read_columns(stale)
        order, ids = c.order, c.ids
        if checked.touched:  # the columns are from before the intents: refresh what they set
            at = np.searchsorted(ids, np.unique(np.concatenate(checked.touched))).tolist()
            for name, col in (("energy_consumption_rate", c.rate), ("speed", c.speed)):
                get = attrgetter(name)
                col[at] = [get(order[i]) for i in at]
        if checked.directions is not None:
            set_ids, values = checked.directions
            c.direction[np.searchsorted(ids, set_ids)] = values
        if checked.one_by_one_directions:
            one = checked.one_by_one_directions
            c.direction[np.searchsorted(ids, np.fromiter(one, dtype=np.int64, count=len(one)))] = list(one.values())
        return c

    def _eat(self, c: TickColumns, eats: set[int]) -> None:
        """Eating (``engine.core.physics.eat``), and the resource caches kept in step."""
        if not self.resources:
            return
        who = eaters(c, eats, self.params.hunger_fraction)
        if not len(who):
            return
        eaten = eat(who, c, self.resources, self._rgrid, self._resource_near_layout(), self.params.eat_radius)
        if not eaten:
            return
        self._resources_changed()
        if self._resource_columns is not None:
            ids, xs, ys = self._resource_columns
            keep = np.ones(len(ids), dtype=bool)
            keep[np.searchsorted(ids, eaten)] = False
            self._resource_columns = (ids[keep], xs[keep], ys[keep])

    def _collide(self, c: TickColumns) -> dict[int, float]:
        """Collisions (``engine.core.physics.collide``); the energy before the damage of those hit."""
        p = self.params
        hit_before, pairs = collide(c, self._near_grid, p.collision_radius, p.collision_damage)
        self._counters.collisions += pairs
        return hit_before

    def _reproduce_or_die(
        self, c: TickColumns, hit_before: dict[int, float], rng: random.Random, report: TickReport
    ) -> tuple[list[tuple[int, Entity, str]], list[int]]:
        """Births, and who dies of what: entity by entity, ids ascending, an entity out of energy
        dies (of collision if a collision took its last energy, else of starvation), one past its
        max age dies of age, and a mature one with enough energy gives birth while the population
        has room. Newborns are not in the tick's columns, so they neither die nor reproduce in the
        tick they are born. Returns the dead as (index, entity, cause) and the parents' indices."""
        p = self.params
        threshold = p.reproduction_threshold
        maturity = p.maturity_age
        cost = p.reproduction_cost
        order = c.order
        room = p.max_population - len(order)
        energy, age = c.energy, c.age
        notable = (energy <= 0.0) | (age >= c.max_age) | ((energy >= threshold) & (age >= maturity))
        # The entities read below get this tick's numbers now; the others when next read.
        at = notable.nonzero()[0]
        _store_numbers([order[i] for i in at.tolist()], c.nx[at], c.ny[at], c.direction[at], energy[at], age[at])
        entities = self.entities
        trait_births = self._counters.trait_births
        dead: list[tuple[int, Entity, str]] = []
        parents: list[int] = []
        for i in at.tolist():
            e = order[i]
            if e.energy <= 0.0:
                before = hit_before.get(e.id)
                dead.append((i, e, "collision" if before is not None and before > 0.0 else "starvation"))
            elif e.age >= e.max_age:
                dead.append((i, e, "age"))
            elif e.energy >= threshold and e.age >= maturity and room > 0:
                room -= 1
                e.energy -= cost
                parents.append(i)
                cid = self._new_entity_id()
                dna_rng = self._rng(f"dna:{cid}")
                child = newborn(e, cid, p, self._xmax, self._ymax, rng, dna_rng)
                for name in e.traits:
                    trait_births[name] = trait_births.get(name, 0) + 1
                self._give_new_trait(child, dna_rng, report)
                entities[cid] = child
                report.births.append(cid)
        self._counters.births += len(report.births)
        return dead, parents

    def _remove_dead(self, dead: list[tuple[int, Entity, str]], report: TickReport) -> None:
        """Deaths: the dead leave the world, counted by cause and by the traits they carried."""
        entities = self.entities
        deaths = report.deaths
        counts = self._counters.deaths
        trait_deaths = self._counters.trait_deaths
        bodies = {eid: m for m, eid in self.members.items()} if self.members else {}
        for _, e, cause in dead:
            del entities[e.id]
            deaths.append((e.id, cause))
            if e.id in bodies:
                del self.members[bodies[e.id]]
            counts[cause] += 1
            for name in e.traits:
                by_cause = trait_deaths.get(name)
                if by_cause is None:
                    by_cause = trait_deaths[name] = {c: 0 for c in DEATH_CAUSES}
                by_cause[cause] += 1

    def _keep_population_floor(self, rng: random.Random, report: TickReport) -> None:
        """Fresh entities while the population is below ``min_population`` (0: off)."""
        entities = self.entities
        while len(entities) < self.params.min_population:
            fresh = self._spawn_fresh(rng)
            self._give_new_trait(fresh, self._rng(f"trait:{fresh.id}"), report)
            report.respawned.append(fresh.id)
        self._counters.respawns += len(report.respawned)

    def _keep_columns(
        self,
        c: TickColumns,
        dead: list[tuple[int, Entity, str]],
        parents: list[int],
        report: TickReport,
        lazy_write_back: bool,
    ) -> None:
        """The tick's columns become the world's (:attr:`_columns`, the entity layout) for the
        next tick and the views, and are stored into the entities now or, lazily, when next read."""
        energy = c.energy
        if parents:  # they paid for their children
            energy[parents] = [c.order[i].energy for i in parents]
        after = {
            "id": c.ids,
            "x": c.nx,
            "y": c.ny,
            "energy": energy,
            "max_energy": c.max_energy,
            "age": c.age,
            "max_age": c.max_age,
            "generation": c.generation,
            "speed": c.speed,
            "direction": c.direction,
            "energy_consumption_rate": c.rate,
        }
        if dead or report.births or report.respawned:
            keep = np.ones(len(c.ids), dtype=bool)
            keep[[i for i, _, _ in dead]] = False
            entities = self.entities
            new = [entities[i] for i in report.births + report.respawned]
            order = list(compress(c.order, keep.tolist())) + new
            after = {
                name: np.concatenate(
                    [after[name][keep], np.fromiter(map(attrgetter(name), new), dtype=dtype, count=len(new))]
                )
                for name, dtype in _WORLD_COLUMNS
            }
        else:
            order = c.order
        self._columns = after
        self._column_order = (after, order)
        self._positions = Layout(self._grid, after["x"], after["y"], after["id"])
        self._unwritten = (c.order, c.nx, c.ny, c.direction, energy, c.age)
        if not lazy_write_back:
            self._write_back()

    def _respawn_resource(self, rng: random.Random) -> None:
        """Below ``max_resources``, one resource appears with ``resource_spawn_chance``."""
        p = self.params
        if len(self.resources) < p.max_resources and rng.random() < p.resource_spawn_chance:
            self._spawn_resource(rng)

    def _count_rejections(self, rejected: list[tuple[int, str]]) -> None:
        counter = self._counters.rejected
        for _, reason in rejected:
            counter[reason] = counter.get(reason, 0) + 1

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
        counts = self._counters
        names = set(usage) | set(self.available_traits) | set(counts.trait_births)
        names |= set(counts.trait_deaths) | set(counts.trait_gains)
        no_deaths = {c: 0 for c in DEATH_CAUSES}
        trait_stats = {
            name: {
                "carriers": usage.get(name, 0),
                "avg_energy": energy_by_trait[name] / usage[name] if name in usage else 0.0,
                "births": counts.trait_births.get(name, 0),
                "deaths": dict(counts.trait_deaths.get(name, no_deaths)),
                "gained": counts.trait_gains.get(name, 0),
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
            "deaths": dict(counts.deaths),
            "births": counts.births,
            "respawns": counts.respawns,
            "collisions": counts.collisions,
            "trait_usage": {name: usage[name] for name in sorted(usage)},
            "trait_stats": trait_stats,
            "available_traits": list(self.available_traits),
            "rejected_intents": {r: counts.rejected[r] for r in sorted(counts.rejected)},
        }

    def state_hash(self) -> str:
        """sha256 hex of the exact state (``engine.core.state_digest``), read from the entities."""
        return digest(self.state_columns()).hex

    def state_digest(self, constants: ConstantColumns, text_codes: TextCodes) -> Digest:
        """The state hash and its probe after a step, from the world's own columns: the engine's
        per-tick digest (``constants`` and ``text_codes`` are its caches across ticks). Equal to
        :meth:`state_hash` as long as entities change only through the world."""
        return digest(self.state_columns(constants), text_codes)

    def state_columns(self, constants: ConstantColumns | None = None) -> StateColumns:
        """The exact state as columns. Without ``constants`` every value is read from the entity
        objects; with them, the numbers come from the world's columns when they are current, and
        parent_id and DNA from ``constants``."""
        kept = self._ordered_columns() if constants is not None else None
        if kept is not None:
            ents = self._entities  # only ids, traits and states are read from them: never left unwritten
            n = len(ents)
            cols, order = kept
        else:
            ents = self.entities  # every number up to date in the objects
            n = len(ents)
            order = [ents[i] for i in sorted(ents)]
            cols = {
                name: np.fromiter(map(attrgetter(name), order), dtype=dtype, count=n) for name, dtype in _WORLD_COLUMNS
            }
        if constants is not None:
            parent, dna = constants.of(cols["id"], ents)
        else:
            parent = np.fromiter((-1 if e.parent_id is None else e.parent_id for e in order), dtype=np.int64, count=n)
            dna = np.array(
                [e.dna if len(e.dna) == DNA_GENES else (-1.0,) * DNA_GENES for e in order], dtype=np.float64
            ).reshape(n, DNA_GENES)
        res = self.resources
        rkeys = sorted(res)
        rorder = [res[i] for i in rkeys]
        m = len(rorder)
        return StateColumns(
            tick=self.tick,
            available_traits=self.available_traits,
            members=sorted(self.members.items()),
            numbers=cols,
            parent=parent,
            dna=dna,
            # states are printable and trait names snake_case: the separators cannot occur inside
            # them (written out here: a function call per entity was most of this method's time)
            texts=[e.state + "\x1f" + "\x1f".join(e.traits) for e in order],
            resources={
                "id": np.array(rkeys, dtype=np.int64),
                "x": np.fromiter(map(_X, rorder), dtype=np.float64, count=m),
                "y": np.fromiter(map(_Y, rorder), dtype=np.float64, count=m),
                "energy": np.fromiter(map(attrgetter("energy"), rorder), dtype=np.float64, count=m),
            },
        )

    # -- save / resume ----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        """Everything needed to resume this world exactly (plain JSON-safe data)."""
        return {
            "version": world_state.SNAPSHOT_VERSION,
            "params": asdict(self.params),
            "seed": self.seed,
            "tick": self.tick,
            "next_entity_id": self._next_entity_id,
            "next_resource_id": self._next_resource_id,
            "counters": world_state.counters_to_data(self._counters),
            "available_traits": list(self.available_traits),
            "entities": [world_state.entity_to_data(self.entities[i]) for i in sorted(self.entities)],
            "resources": [world_state.resource_to_data(self.resources[i]) for i in sorted(self.resources)],
            "members": [[m, eid] for m, eid in sorted(self.members.items())],
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
        w._counters = world_state.counters_from_data(snap["counters"])
        w.set_available_traits([str(t) for t in snap.get("available_traits", [])])
        w.members = {int(m): int(eid) for m, eid in snap.get("members", [])}
        w._set_bounds(params)
        w.entities = {}
        for d in sorted(snap["entities"], key=lambda d: d["id"]):
            e = world_state.entity_from_data(d)
            w.entities[e.id] = e
        w.resources = {}
        w._rgrid = SpatialGrid(params.width, params.height, params.sense_radius)
        for d in sorted(snap["resources"], key=lambda d: d["id"]):
            r = world_state.resource_from_data(d)
            w.resources[r.id] = r
            w._rgrid.insert(r)
        return w
