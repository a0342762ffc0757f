"""The physics of one tick over numpy columns of every entity: movement, eating, metabolism and
aging, collisions.

Each rule runs over all entities at once (ids ascending) with the float operations of the rule
for one entity, in the same order, and ``math``'s cos/sin/hypot/atan2 applied element by
element (numpy's own may differ in the last bit from one CPU to another); so the result does not
depend on vectorising and is the same on every machine. Only eaters that find a resource go
entity by entity (each takes what is left, lowest id first).

Movement: the distance moved per tick is ``min(speed, MAX_SPEED * min(1, energy_consumption_rate))``,
positions are clamped into ``0 <= x < width``, ``0 <= y < height``; an entity with a move intent
follows it, any other wanders (small random turn, bouncing off walls).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from genesis.entity_api import MAX_SPEED

from .intents import CheckedIntents
from .model import Entity, Resource, WorldParams
from .sensing import Grid, Layout, close_pairs, nearest
from .spatial import SpatialGrid

_PI = math.pi
_TWO_PI = 2.0 * math.pi


@dataclass(slots=True)
class TickColumns:
    """The numbers of every living entity during one tick, ids ascending. The phases replace
    or change them in place; ``x``/``y`` stay where the entities started the tick."""

    order: list[Entity]  # the entities, ids ascending
    ids: np.ndarray
    x: np.ndarray
    y: np.ndarray
    nx: np.ndarray  # the position after movement
    ny: np.ndarray
    direction: np.ndarray
    speed: np.ndarray
    rate: np.ndarray  # energy_consumption_rate
    energy: np.ndarray
    max_energy: np.ndarray
    age: np.ndarray
    max_age: np.ndarray
    generation: np.ndarray

    @classmethod
    def of(cls, order: list[Entity], ids: np.ndarray, cols: dict[str, np.ndarray]) -> TickColumns:
        """The tick's columns from the world's columns ``cols``: copies of those the tick changes
        in place, the others shared."""
        x = cols["x"]
        y = cols["y"]
        return cls(
            order,
            ids,
            x,
            y,
            x.copy(),
            y.copy(),
            cols["direction"].copy(),
            cols["speed"].copy(),
            cols["energy_consumption_rate"].copy(),
            cols["energy"].copy(),
            cols["max_energy"],
            cols["age"],
            cols["max_age"],
            cols["generation"],
        )


def move(
    c: TickColumns, checked: CheckedIntents, rnd: Callable[[], float], wander_turn: float, xmax: float, ymax: float
) -> np.ndarray:
    """Movement: each entity by its move intent, or else wandering (one draw of ``rnd`` per
    wanderer, ids ascending); sets ``nx``, ``ny`` and ``direction``, returns the distance moved.
    ``xmax``/``ymax``: the largest coordinates."""
    x, y, nx, ny, direction = c.x, c.y, c.nx, c.ny, c.direction
    n = len(c.ids)
    cap = np.where(c.rate < 1.0, MAX_SPEED * c.rate, MAX_SPEED)
    sp = np.where(c.speed > cap, cap, c.speed)
    moving = np.zeros(n, dtype=bool)
    if checked.moves or checked.bulk_moves is not None:
        towards, a, b = _intended_moves(c.ids, checked, moving)
        _move_by_intent(moving.nonzero()[0], towards, a, b, x, y, sp, nx, ny, direction, xmax, ymax)
    wander = (~moving).nonzero()[0]
    if len(wander):
        _wander(wander, rnd, wander_turn, x, y, sp, nx, ny, direction, xmax, ymax)
    return np.fromiter(map(math.hypot, (nx - x).tolist(), (ny - y).tolist()), np.float64, n)


def _intended_moves(
    ids: np.ndarray, checked: CheckedIntents, moving: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every entity's move intent as columns (towards a point?, a, b); marks who has one in
    ``moving``."""
    n = len(ids)
    towards = np.zeros(n, dtype=bool)
    a = np.zeros(n)
    b = np.zeros(n)
    bulk_moves = checked.bulk_moves
    if bulk_moves is not None:  # ids unique, none of them in ``moves``
        at = np.searchsorted(ids, bulk_moves[0])
        moving[at] = True
        towards[at], a[at], b[at] = bulk_moves[1:]
    moves = checked.moves
    if moves:
        at = np.searchsorted(ids, np.fromiter(moves, dtype=np.int64, count=len(moves)))
        moving[at] = True
        vals = list(moves.values())
        towards[at] = [m[0] for m in vals]
        a[at] = [m[1] for m in vals]
        b[at] = [m[2] for m in vals]
    return towards, a, b


def _move_by_intent(
    idx: np.ndarray,
    towards: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    x: np.ndarray,
    y: np.ndarray,
    sp: np.ndarray,
    nx: np.ndarray,
    ny: np.ndarray,
    direction: np.ndarray,
    xmax: float,
    ymax: float,
) -> None:
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
    mx = np.where(mx < 0.0, 0.0, np.where(mx > xmax, xmax, mx))
    my = np.where(my < 0.0, 0.0, np.where(my > ymax, ymax, my))
    nx[idx] = np.where(step, mx, px)
    ny[idx] = np.where(step, my, py)
    direction[idx] = np.fromiter(map(math.atan2, uyl, uxl), np.float64, len(uxl))


def _wander(
    wander: np.ndarray,
    rnd: Callable[[], float],
    turn: float,
    x: np.ndarray,
    y: np.ndarray,
    sp: np.ndarray,
    nx: np.ndarray,
    ny: np.ndarray,
    direction: np.ndarray,
    xmax: float,
    ymax: float,
) -> None:
    """Instinct of the entities at ``wander``: a small random turn, a step at ``sp``, bouncing
    off the walls."""
    draws = np.array([rnd() for _ in range(len(wander))])
    d = direction[wander] + (draws * 2.0 - 1.0) * turn
    d = np.where(d > _PI, d - _TWO_PI, np.where(d < -_PI, d + _TWO_PI, d))
    dl = d.tolist()
    wx = x[wander] + np.fromiter(map(math.cos, dl), np.float64, len(dl)) * sp[wander]
    wy = y[wander] + np.fromiter(map(math.sin, dl), np.float64, len(dl)) * sp[wander]
    out_x = (wx < 0.0) | (wx > xmax)
    if out_x.any():
        wx = np.where(out_x, np.where(wx < 0.0, 0.0, xmax), wx)
        bounced = _PI - d
        d = np.where(out_x, np.where(bounced > _PI, bounced - _TWO_PI, bounced), d)
    out_y = (wy < 0.0) | (wy > ymax)
    if out_y.any():
        wy = np.where(out_y, np.where(wy < 0.0, 0.0, ymax), wy)
        d = np.where(out_y, -d, d)
    nx[wander] = wx
    ny[wander] = wy
    direction[wander] = d


def eaters(c: TickColumns, eats: set[int], hunger_fraction: float) -> np.ndarray:
    """Indices (ids ascending) of the entities that eat this tick: the hungry (energy below
    ``hunger_fraction`` of their max) and those that asked to (``eats``: ids)."""
    eater = c.energy < hunger_fraction * c.max_energy
    if eats:
        eater[np.searchsorted(c.ids, np.fromiter(eats, dtype=np.int64, count=len(eats)))] = True
    return eater.nonzero()[0]


def eat(
    who: np.ndarray, c: TickColumns, resources: dict[int, Resource], rgrid: SpatialGrid, lay: Layout, eat_radius: float
) -> list[int]:
    """The eaters at ``who`` (indices, ids ascending), at their new position, take the nearest
    resource within ``eat_radius`` that is still there (ties by lower id); their energy gains it,
    up to their max. ``lay``: the resources laid out for this query. Eaten resources leave
    ``resources`` and ``rgrid``; returns their ids."""
    nx, ny, energy, max_energy = c.nx, c.ny, c.energy, c.max_energy
    found, _, _ = nearest(nx[who], ny[who], lay, eat_radius)
    hit = found >= 0
    eaten: list[int] = []
    if not hit.any():
        return eaten
    for i, rid in zip(who[hit].tolist(), found[hit].tolist()):
        res = resources.get(rid)
        if res is None:  # an eater with a lower id took it: the nearest of what is left
            if not resources:
                break
            near = rgrid.nearest(float(nx[i]), float(ny[i]), eat_radius)
            if near is None:
                continue
            res = near[0]
        gained = energy[i] + res.energy
        energy[i] = max_energy[i] if gained > max_energy[i] else gained
        rgrid.remove(res)
        del resources[res.id]
        eaten.append(res.id)
    return eaten


def metabolise_and_age(c: TickColumns, moved: np.ndarray, params: WorldParams) -> None:
    """Metabolism (a base cost times the rate, plus a cost per distance moved) and aging."""
    c.energy = c.energy - params.base_metabolism * c.rate - params.move_cost * moved
    c.age = c.age + 1


def collide(c: TickColumns, near_grid: Grid, radius: float, damage: float) -> tuple[dict[int, float], int]:
    """Collisions: every pair closer than ``radius`` (each pair once) costs both ``damage``.
    Returns the energy before the damage of every entity hit (by id: a death tells collision
    from starvation by it) and the number of pairs."""
    n = len(c.ids)
    if not (radius > 0.0 and damage > 0.0 and n > 1):
        return {}, 0
    lo, hi = close_pairs(Layout(near_grid, c.nx, c.ny, c.ids), radius)
    if not len(lo):
        return {}, 0
    hits = np.bincount(np.concatenate([lo, hi]), minlength=n)
    hit = hits.nonzero()[0]
    energy = c.energy
    before = dict(zip(c.ids[hit].tolist(), energy[hit].tolist()))
    for k in range(int(hits.max())):  # one subtraction per pair, as pair by pair
        energy = np.where(hits > k, energy - damage, energy)
    c.energy = energy
    return before, len(lo)
