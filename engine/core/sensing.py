"""Neighbourhood queries for many points at once, over numpy arrays laid out by grid cell.

A :class:`Layout` holds points (entities or resources) sorted by the cell of a uniform grid
(cell size = the query radius or more), with each cell's [start, length) run. For every query
point the 3x3 block of cells around its cell is expanded into (query, candidate) pairs, the
squared distances are computed for all pairs in one go, and the results reduced per query.
The float operations are those of the scalar loops they replaced (``dx = ox - x``,
``dx*dx + dy*dy <= r*r``; nearest by squared distance, ties by lower id), so results are
bit-identical and deterministic; only the cost changes.

Used for what each entity senses (neighbour count, nearest resource), for eating (nearest
resource within eat_radius) and for collisions (pairs closer than collision_radius).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from operator import attrgetter
from typing import Any

import numpy as np

_OFFSETS = [(dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
_X = attrgetter("x")
_Y = attrgetter("y")
_ID = attrgetter("id")
_EMPTY = np.empty(0, dtype=np.int64)
_FORWARD = [(0, 0), (1, 0), (-1, 1), (0, 1), (1, 1)]
_BLOCKS: dict[tuple[Grid, bool], np.ndarray] = {}  # Grid.block() (few distinct grids per process)
# nearest()'s two-step search pays when the one-step search would measure at least this many
# (query, point) pairs (see two_steps_pay).
TWO_STEPS_MIN_PAIRS = 5000


@dataclass
class Sensed:
    """Per query entity (in the order given): ``neighbors`` (int64) and the nearest resource's
    ``dx``, ``dy``, ``dist`` (float64, NaN when none is within range)."""

    neighbors: np.ndarray
    dx: np.ndarray
    dy: np.ndarray
    dist: np.ndarray


@dataclass(frozen=True)
class Grid:
    """A uniform grid over the world: cells of ``cell`` units, positions clamped to the border
    cells (as engine/core/spatial.py's SpatialGrid)."""

    inv: float
    cols: int
    rows: int
    cell: float

    @classmethod
    def over(cls, width: float, height: float, cell: float) -> Grid:
        cell = float(cell)
        return cls(1.0 / cell, max(1, math.ceil(width / cell)), max(1, math.ceil(height / cell)), cell)

    def cells_of(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        # astype truncates toward zero, as int() does; negatives clamp to 0 either way.
        # (minimum/maximum in place: np.clip's wrapper costs ~20 us a call, 10 calls a tick)
        cx = (x * self.inv).astype(np.int64)
        cy = (y * self.inv).astype(np.int64)
        np.minimum(np.maximum(cx, 0, out=cx), self.cols - 1, out=cx)
        np.minimum(np.maximum(cy, 0, out=cy), self.rows - 1, out=cy)
        return cx, cy

    def block(self, forward: bool = False) -> np.ndarray:
        """Per cell (row-major), the 9 cells of its 3x3 block (``forward``: the cell itself and the
        4 neighbours after it, so that of two adjacent cells exactly one lists the other);
        outside the grid: the empty sentinel cell ``cols * rows``."""
        cached = _BLOCKS.get((self, forward))
        if cached is None:
            grid_x, grid_y = np.meshgrid(np.arange(self.cols), np.arange(self.rows))
            cx, cy = grid_x.ravel(), grid_y.ravel()
            out = []
            for ox, oy in _FORWARD if forward else _OFFSETS:
                nx, ny = cx + ox, cy + oy
                ok = (nx >= 0) & (nx < self.cols) & (ny >= 0) & (ny < self.rows)
                out.append(np.where(ok, ny * self.cols + nx, self.cols * self.rows))
            cached = _BLOCKS[(self, forward)] = np.stack(out, axis=1)
        return cached


class Layout:
    """Points sorted by cell: ``x``, ``y``, ``ids``, ``index`` (position in the arrays given)
    and ``start`` (row 0: a cell's first index, row 1: its length)."""

    __slots__ = ("grid", "x", "y", "ids", "index", "start", "keys")

    def __init__(self, grid: Grid, x: np.ndarray, y: np.ndarray, ids: np.ndarray) -> None:
        cx, cy = grid.cells_of(x, y)
        keys = cy * grid.cols + cx
        # a stable sort of small keys is a radix sort: ten times faster than of int64
        order = np.argsort(keys.astype(np.uint16) if grid.cols * grid.rows < 2**16 else keys, kind="stable")
        per_cell = np.bincount(keys, minlength=grid.cols * grid.rows + 1)  # + the empty sentinel
        self.grid = grid
        self.index = order
        self.x = x[order]
        self.y = y[order]
        self.ids = ids[order]
        self.keys = keys[order]
        start = np.empty((2, len(per_cell)), dtype=per_cell.dtype)  # (np.stack: ~10 us more a call)
        np.cumsum(per_cell, out=start[0])
        start[0] -= per_cell
        start[1] = per_cell
        self.start = start

    @classmethod
    def of_items(cls, grid: Grid, items: Iterable[Any], count: int) -> Layout:
        """The layout of objects with ``id``, ``x``, ``y`` (in the order given)."""
        items = list(items)
        return cls(
            grid,
            np.fromiter(map(_X, items), dtype=np.float64, count=count),
            np.fromiter(map(_Y, items), dtype=np.float64, count=count),
            np.fromiter(map(_ID, items), dtype=np.int64, count=count),
        )

    def __len__(self) -> int:
        return len(self.x)


def pairs(qx: np.ndarray, qy: np.ndarray, lay: Layout, forward: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(query index, layout index) for every point in the 3x3 block of each query's cell
    (``forward``: in the cells of ``Grid.block(forward=True)``)."""
    grid = lay.grid
    qcx, qcy = grid.cells_of(qx, qy)
    block = grid.block(forward)
    width = block.shape[1]
    cells = block[qcy * grid.cols + qcx].ravel()  # ``width`` per query, query by query
    first = lay.start[0, cells]
    length = lay.start[1, cells]
    total = int(length.sum())
    if total == 0:
        return _EMPTY, _EMPTY
    run_offset = np.cumsum(length) - length  # where each run starts among the pairs
    pair_q = np.repeat(np.arange(len(cells), dtype=np.int64) // width, length)
    pair_item = np.repeat(first - run_offset, length) + np.arange(total, dtype=np.int64)
    return pair_q, pair_item


def nearest(
    qx: np.ndarray, qy: np.ndarray, lay: Layout, radius: float, near: Layout | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per query: the id of the nearest point with ``dx*dx + dy*dy <= radius**2`` (ties by
    lower id; -1 if none), and its dx, dy (NaN if none).

    ``near``: the same points on a finer grid (cell <= radius): every query first looks only at
    the points within one of its cells, which holds the answer whenever one is that close, and
    only the others search the whole radius (at the usual densities most queries stop early;
    pass it only where that pays, see :func:`two_steps_pay`). Same answers either way."""
    if near is not None and near.grid.inv > lay.grid.inv and len(qx):
        close = near.grid.cell * 0.99  # well inside the 3x3 block, whatever the rounding
        found, ndx, ndy = nearest(qx, qy, near, close)
        far = (found < 0).nonzero()[0]
        if len(far):
            found[far], ndx[far], ndy[far] = nearest(qx[far], qy[far], lay, radius)
        return found, ndx, ndy
    n = len(qx)
    found = np.full(n, -1, dtype=np.int64)
    ndx = np.full(n, np.nan)
    ndy = np.full(n, np.nan)
    if not n or not len(lay):
        return found, ndx, ndy
    pq, pi = pairs(qx, qy, lay)
    dx = lay.x[pi] - qx[pq]
    dy = lay.y[pi] - qy[pq]
    d2 = dx * dx + dy * dy
    hit = (d2 <= radius * radius).nonzero()[0]
    if len(hit):
        pq, pi, d2 = pq[hit], pi[hit], d2[hit]
        # Pairs come query by query (pq ascending), so each query's candidates are one run:
        # per run the smallest distance, then among those at it the lowest id.
        run = np.concatenate(([True], pq[1:] != pq[:-1])).nonzero()[0]
        best = np.minimum.reduceat(d2, run)
        tie = (d2 == np.repeat(best, np.diff(np.append(run, len(pq))))).nonzero()[0]
        pq, pi = pq[tie], pi[tie]
        rid = lay.ids[pi]
        run = np.concatenate(([True], pq[1:] != pq[:-1])).nonzero()[0]
        low = np.minimum.reduceat(rid, run)
        pick = rid == np.repeat(low, np.diff(np.append(run, len(pq))))  # one per query
        who = pq[pick]
        pi = pi[pick]
        found[who] = lay.ids[pi]
        ndx[who] = lay.x[pi] - qx[who]
        ndy[who] = lay.y[pi] - qy[who]
    return found, ndx, ndy


def two_steps_pay(queries: int, lay: Layout) -> bool:
    """Whether nearest()'s two-step search (``near``) is worth its second round of numpy calls:
    when the one-step search would measure many pairs (``TWO_STEPS_MIN_PAIRS``; measured on
    this machine: with fewer, e.g. 5,000 queries among 40-100 resources on the bench's world,
    or 500 among 500, one step is faster; with more, e.g. 5,000 among 300 or 1,000 among 300 on
    800 x 600, two are)."""
    grid = lay.grid
    return queries * len(lay) * 9 >= TWO_STEPS_MIN_PAIRS * grid.cols * grid.rows


def neighbour_counts(lay: Layout, radius: float) -> np.ndarray:
    """For every point (in the order of the arrays the layout was built from), how many other
    points are within ``radius`` (``dx*dx + dy*dy <= radius**2``). Each pair of points in two
    different cells is measured once and counted for both (``a - b`` is exactly ``-(b - a)``, so
    the squared distance is the same either way): half the work of a query per point."""
    n = len(lay)
    pq, pi = pairs(lay.x, lay.y, lay, forward=True)
    dx = lay.x[pi] - lay.x[pq]
    dy = lay.y[pi] - lay.y[pq]
    within = dx * dx + dy * dy <= radius * radius
    # same cell: every ordered pair (and the point with itself) is among the pairs already
    other_cell = within & (lay.keys[pi] != lay.keys[pq])
    counts = np.bincount(pq, weights=within, minlength=n) + np.bincount(pi, weights=other_cell, minlength=n)
    out = np.empty(n, dtype=np.int64)
    out[lay.index] = counts.astype(np.int64) - 1  # less the point itself
    return out


def sense(
    qx: np.ndarray,
    qy: np.ndarray,
    entities: Layout,
    resources: Layout,
    sense_radius: float,
    everyone: bool = False,
    near_resources: Layout | None = None,
) -> Sensed:
    """Neighbour counts (every entity of ``entities`` within range, less the query entity itself,
    which must be among them) and nearest resources of the query points. ``everyone``: the
    queries are exactly the layout's points, in the order it was built from. ``near_resources``:
    the resources on a finer grid (see :func:`nearest`)."""
    n = len(qx)
    if n == 0:
        nan = np.full(0, np.nan)
        return Sensed(np.zeros(0, dtype=np.int64), nan, nan.copy(), nan.copy())
    r2 = sense_radius * sense_radius
    if everyone:
        neighbors = neighbour_counts(entities, sense_radius)
    else:
        # The entity itself is in its own block at distance 0: one less, never below zero.
        neighbors = np.maximum(count_within(qx, qy, entities, r2) - 1, 0)
    found, ndx, ndy = nearest(qx, qy, resources, sense_radius, near_resources)
    dist = np.full(n, np.nan)
    hit = found >= 0
    dist[hit] = np.sqrt(ndx[hit] * ndx[hit] + ndy[hit] * ndy[hit])
    return Sensed(neighbors, ndx, ndy, dist)


def count_within(qx: np.ndarray, qy: np.ndarray, lay: Layout, r2: float) -> np.ndarray:
    """Per query, the points of its cell's 3x3 block with ``dx*dx + dy*dy <= r2`` (int64)."""
    pq, pi = pairs(qx, qy, lay)
    dx = lay.x[pi] - qx[pq]
    dy = lay.y[pi] - qy[pq]
    within = dx * dx + dy * dy <= r2
    return np.bincount(pq, weights=within, minlength=len(qx)).astype(np.int64)


def close_pairs(lay: Layout, radius: float) -> tuple[np.ndarray, np.ndarray]:
    """Every pair of points closer than ``radius`` (``dx*dx + dy*dy < radius**2``), once, as
    (lower-id index, higher-id index) into the arrays the layout was built from: the pairs of
    every 3x3 block, filtered."""
    pq, pi = pairs(lay.x, lay.y, lay)
    ids = lay.ids
    upper = ids[pi] > ids[pq]
    pq, pi = pq[upper], pi[upper]
    dx = lay.x[pi] - lay.x[pq]
    dy = lay.y[pi] - lay.y[pq]
    hit = dx * dx + dy * dy < radius * radius
    return lay.index[pq[hit]], lay.index[pi[hit]]
