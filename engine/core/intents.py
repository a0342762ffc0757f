"""Checking and applying the intents traits send (plain, untrusted data produced by the trait
host): each one is checked against the Entity API (``genesis.entity_api``); ``set`` intents are
applied to the entities at once, moves and eats are handed back to the tick's movement and eating.
Anything malformed is rejected and counted by reason (``REJECT_REASONS``), never raised.

Intents come as ``{entity_id: [intent, ...]}`` (ids must be exact ``int`` — convert JSON's string
keys first) or as the trait host's decoded columns, :class:`genesis.trait_wire.IntentColumns`,
which are checked the same way but applied in bulk (:func:`apply_columns`):

- ``["set", attr, value]`` — only ``entity_api.WRITABLE_ATTRS``; numbers must be ``int`` or
  ``float`` (not bool) and finite, and are clamped to the attribute's bounds (``direction``
  wraps into -pi..pi); ``state`` must be a printable ``str`` of at most MAX_STATE_LENGTH.
- ``["move", dx, dy]`` — move along (dx, dy) at the entity's speed (the vector is a direction).
- ``["move_towards", x, y]`` — move towards a point at the entity's speed, without overshooting.
- ``["eat"]`` — eat the nearest resource within eat_radius this tick, hungry or not.

The last move intent of a tick wins; the movement itself is ``engine.core.physics``'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from genesis.entity_api import MAX_STATE_LENGTH, READABLE_ATTRS, WRITABLE_ATTRS
from genesis.trait_wire import KIND_EAT, KIND_SET, KIND_TOWARDS, IntentColumns

from .model import Entity

_PI = math.pi
_TWO_PI = 2.0 * math.pi

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

# The writable attributes of the Entity API that this world stores (all of v1's).
_WRITABLE = {name: spec for name, spec in WRITABLE_ATTRS.items() if name in Entity.__dataclass_fields__}

# name -> (lo, hi) of the writable numbers (apply_columns clamps them in bulk).
_NUMBERS: dict[str, tuple[float, float]] = {
    name: (lo, hi) for name, (kind, lo, hi) in _WRITABLE.items() if kind != "str" and lo is not None and hi is not None
}


def _set_speed(ents: Any, values: list[float]) -> None:
    for e, v in zip(ents, values):
        e.speed = v


def _set_direction(ents: Any, values: list[float]) -> None:
    for e, v in zip(ents, values):
        e.direction = v


def _set_rate(ents: Any, values: list[float]) -> None:
    for e, v in zip(ents, values):
        e.energy_consumption_rate = v


# One plain loop per number attribute (a store by name is cheaper than setattr per entity).
_SETTERS = {"speed": _set_speed, "direction": _set_direction, "energy_consumption_rate": _set_rate}
assert _SETTERS.keys() == _NUMBERS.keys()


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


@dataclass(slots=True)
class CheckedIntents:
    """What a tick's intents ask of movement and eating, after their ``set`` intents were applied."""

    moves: dict[int, tuple]  # entity id -> its last move intent (towards, a, b), checked one by one
    eats: set[int]  # the ids that asked to eat
    # ids of the entities whose speed or rate may have been set on the Entity: the tick's columns,
    # read before the intents, take these again
    touched: list[np.ndarray] = field(default_factory=list)
    # columnar intents only: each entity's last move as columns (ids, towards, a, b), ids unique
    # and none of them in ``moves``; and the direction sets (ids, values)
    bulk_moves: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None
    directions: tuple[np.ndarray, np.ndarray] | None = None
    # entity id -> its last direction set, checked one by one (none of them in ``directions``).
    # Directions go to the tick's direction column, never to the Entity: the step takes an
    # entity's other numbers from the columns too, and stores them all back after it.
    one_by_one_directions: dict[int, float] = field(default_factory=dict)


def _collect_intents(
    intents: Any, entities: dict[int, Entity], next_id: int, rejected: list[tuple[int, str]]
) -> dict[int, Any]:
    if intents is None:
        return {}
    if not isinstance(intents, Mapping):
        rejected.append((-1, "bad_intents"))
        return {}
    out: dict[int, Any] = {}
    try:
        items = list(intents.items())
    except Exception:
        rejected.append((-1, "bad_intents"))
        return {}
    for k, v in items:
        if type(k) is not int:
            rejected.append((-1, "bad_entity_id"))
        elif k not in entities:
            rejected.append((k, "dead_entity" if 1 <= k < next_id else "unknown_entity"))
        else:
            out[k] = v
    return out


def apply_intents(
    intents: Any, entities: dict[int, Entity], next_id: int, limit: int, rejected: list[tuple[int, str]]
) -> CheckedIntents:
    """Check every entity's intents (ids ascending), apply its ``set`` intents, and return
    each entity's last move intent and the ids that asked to eat. ``next_id`` (the next id the
    world would assign) tells a dead entity from one that never existed; ``limit`` is the most
    intents an entity may send in a tick.

    Setting happens for all entities before anyone moves: a tick's movement, eating,
    metabolism and aging read only the entity's own attributes, so this equals applying
    them entity by entity inside the tick's loop."""
    if isinstance(intents, IntentColumns):
        return apply_columns(intents, entities, next_id, limit, rejected)
    by_entity = _collect_intents(intents, entities, next_id, rejected)
    checked = CheckedIntents({}, set(), [np.fromiter(by_entity, dtype=np.int64, count=len(by_entity))])
    for eid in sorted(by_entity):
        _check_one_by_one(checked, entities[eid], by_entity[eid], limit, rejected)
    return checked


def _check_one_by_one(
    checked: CheckedIntents, e: Entity, lst: Any, limit: int, rejected: list[tuple[int, str]]
) -> None:
    """``e``'s intent list through :func:`apply_intent_list`, its outcome into ``checked``."""
    move, eat, direction = apply_intent_list(e, lst, limit, rejected)
    if move is not None:
        checked.moves[e.id] = move
    if eat:
        checked.eats.add(e.id)
    if direction is not None:
        checked.one_by_one_directions[e.id] = direction


def override_intents(own: CheckedIntents, forced: CheckedIntents) -> CheckedIntents:
    """``own`` with ``forced``'s moves and eats in their place: an entity that ``forced`` moves
    moves so, whatever its own last move was (a settled round's actions over its traits')."""
    moves = dict(own.moves)
    moves.update(forced.moves)
    bulk = own.bulk_moves
    if bulk is not None and forced.moves:
        keep = ~np.isin(bulk[0], np.fromiter(forced.moves, dtype=np.int64, count=len(forced.moves)))
        bulk = (bulk[0][keep], bulk[1][keep], bulk[2][keep], bulk[3][keep]) if keep.any() else None
    return CheckedIntents(
        moves,
        own.eats | forced.eats,
        own.touched + forced.touched,
        bulk_moves=bulk,
        directions=own.directions,
        one_by_one_directions=own.one_by_one_directions | forced.one_by_one_directions,
    )


def apply_columns(
    ic: IntentColumns, entities: dict[int, Entity], next_id: int, limit: int, rejected: list[tuple[int, str]]
) -> CheckedIntents:
    """:func:`apply_intents` of columnar intents, with the same result and rejections; the
    bulk's moves and direction sets come back as columns (``bulk_moves``, ``directions``).

    The intents every check would pass unchanged (a finite float for a number or a move, a
    valid string for ``state``, ``eat``) of entities that sent nothing else are applied in
    bulk; an entity with any other intent, or too many, goes through :func:`apply_intent_list`
    with its whole list, so it is rejected (and counted) exactly as in the plain form."""
    moves: dict[int, tuple] = {}
    eats: set[int] = set()
    ids = ic.entity
    if not len(ids):
        return CheckedIntents(moves, eats)
    kind = ic.kind
    names = ic.names
    uniq, first, inverse, counts = _group(ids)
    uniq_ids = uniq.tolist()
    alive = np.fromiter(map(entities.__contains__, uniq_ids), dtype=bool, count=len(uniq_ids))
    if not alive.all():  # as _collect_intents: in the order the ids first appear
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
        if (
            is_set[i]
            and names[ic.attr[i]] == "state"
            and type(v) is str
            and len(v) <= MAX_STATE_LENGTH
            and v.isprintable()
        ):
            odd[i] = False
            state_sets.append(i)
        else:
            odd[i] = True
    for i in ic.over_b:
        if is_move[i]:
            odd[i] = True
    odd_entity = np.zeros(len(uniq_ids), dtype=bool)
    odd_entity[inverse[odd]] = True
    odd_entity |= counts > limit
    plain = (alive & ~odd_entity)[inverse]
    # sets: per attribute, in intent order (the last one wins)
    checked = CheckedIntents(moves, eats, [uniq[alive & odd_entity]])
    touched = checked.touched
    plain_set = plain & is_set
    # the attributes set (attr is in range for every set: checked by decode_intents)
    used = np.bincount(ic.attr[plain_set], minlength=len(names)).nonzero()[0].tolist()
    for name in sorted({names[j] for j in used} & _NUMBERS.keys()):
        at = [j for j, nm in enumerate(names) if nm == name]
        sel = plain_set & (ic.attr == at[0] if len(at) == 1 else np.isin(ic.attr, at))
        values = ic.a[sel]
        if name == "direction":  # the tick takes these as a column (every direction is stored back)
            vals = values.tolist()
            for j in ((values < -_PI) | (values > _PI)).nonzero()[0].tolist():
                vals[j] = _wrap_angle(vals[j])
            keep = _last_of_each(ids[sel])
            checked.directions = (ids[sel][keep], np.array(vals)[keep])
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
        checked.bulk_moves = (ids[sel], kind[sel] == KIND_TOWARDS, ic.a[sel], ic.b[sel])
    eats.update(ids[plain & (kind == KIND_EAT)].tolist())
    odd_alive = (alive & odd_entity).nonzero()[0]
    if len(odd_alive):
        order = np.argsort(ids, kind="stable")  # each entity's intents stay in order
        ends = np.cumsum(counts)
        for j in odd_alive.tolist():
            lst = ic.lists_of(order[ends[j] - counts[j] : ends[j]])
            _check_one_by_one(checked, entities[uniq_ids[j]], lst, limit, rejected)
    return checked


def apply_intent_list(
    e: Entity, lst: Any, limit: int, rejected: list[tuple[int, str]]
) -> tuple[Any, bool, float | None]:
    """Apply ``set`` intents to ``e``, but for direction; return (last move intent or None, eat
    requested, last direction set or None)."""
    eid = e.id
    if type(lst) not in (list, tuple):
        rejected.append((eid, "bad_intent_list"))
        return None, False, None
    if len(lst) > limit:
        rejected.append((eid, "too_many_intents"))
        lst = lst[:limit]
    move = None
    eat = False
    direction = None
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
            if isinstance(v, str):
                rejected.append((eid, v))
                continue
            if attr == "direction":
                direction = _wrap_angle(v)
            else:
                lo, hi = _NUMBERS[attr]
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
            problem = a if isinstance(a, str) else b if isinstance(b, str) else None
            if problem is not None:
                rejected.append((eid, problem))
                continue
            move = (kind == "move_towards", a, b)
        elif kind == "eat":
            if n != 1:
                rejected.append((eid, "bad_arity"))
                continue
            eat = True
        else:
            rejected.append((eid, "unknown_kind"))
    return move, eat, direction


# -- the tick ---------------------------------------------------------------------------
