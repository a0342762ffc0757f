"""What each entity senses, for many entities at once: neighbour count and nearest resource.

Vectorised with numpy over the world's uniform grids (engine/spatial.py): for every query
entity the 3x3 block of cells around its cell is expanded into (query, candidate) pairs, the
squared distances are computed for all pairs in one go, and the results reduced per query.
This is the same rule, with the same float operations in the same order, as the scalar
loop it replaces (``dx = ox - x``, ``dx*dx + dy*dy <= r*r``; nearest resource by squared
distance, ties by lower resource id), so results are bit-identical and deterministic; only
the cost changes (the scalar loop was the largest part of a tick at thousands of entities).

Grid membership is read from the grids themselves (an item is found in the cell it was
inserted in) while coordinates are read from the items, exactly as the scalar loop did.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Sequence

import numpy as np

from .spatial import SpatialGrid

_OFFSETS = [(dx, dy) for dy in (-1, 0, 1) for dx in (-1, 0, 1)]
_X = attrgetter("x")
_Y = attrgetter("y")
_ID = attrgetter("id")
_ID_MAX = np.iinfo(np.int64).max


@dataclass
class Sensed:
    """Per query entity (in the order given): ``neighbors`` (int64) and the nearest resource's
    ``dx``, ``dy``, ``dist`` (float64, NaN when none is within range)."""

    neighbors: np.ndarray
    dx: np.ndarray
    dy: np.ndarray
    dist: np.ndarray


class _GridArrays:
    """A grid's items sorted by cell: coordinates, ids and per-cell [start, end) offsets."""

    __slots__ = ("x", "y", "ids", "start")

    def __init__(self, grid: SpatialGrid, with_ids: bool) -> None:
        cells = grid.cells
        keys = np.fromiter(cells.keys(), dtype=np.int64, count=len(cells))
        counts = np.fromiter(map(len, cells.values()), dtype=np.int64, count=len(cells))
        items = [item for bucket in cells.values() for item in bucket]
        n = len(items)
        self.x = np.fromiter(map(_X, items), dtype=np.float64, count=n)
        self.y = np.fromiter(map(_Y, items), dtype=np.float64, count=n)
        self.ids = np.fromiter(map(_ID, items), dtype=np.int64, count=n) if with_ids else None
        # Items are laid out bucket by bucket (dict order); start[cell] is where a cell's run
        # begins, so cells need not be contiguous or sorted.
        ncell = grid.cols * grid.rows
        per_cell = np.zeros(ncell, dtype=np.int64)
        per_cell[keys] = counts
        run_start = np.zeros(ncell, dtype=np.int64)
        run_start[keys] = np.cumsum(counts) - counts
        self.start = np.stack([run_start, per_cell])  # row 0: first index, row 1: length


def _pairs(qcx: np.ndarray, qcy: np.ndarray, grid: SpatialGrid, arrays: _GridArrays) -> tuple[np.ndarray, np.ndarray]:
    """(query index, item index) for every item in the 3x3 block of each query's cell."""
    cols, rows = grid.cols, grid.rows
    q_parts, first_parts, len_parts = [], [], []
    nq = len(qcx)
    qidx = np.arange(nq, dtype=np.int64)
    for ox, oy in _OFFSETS:
        cx = qcx + ox
        cy = qcy + oy
        ok = (cx >= 0) & (cx < cols) & (cy >= 0) & (cy < rows)
        cell = (cy * cols + cx)[ok]
        first = arrays.start[0, cell]
        length = arrays.start[1, cell]
        keep = length > 0
        q_parts.append(qidx[ok][keep])
        first_parts.append(first[keep])
        len_parts.append(length[keep])
    q = np.concatenate(q_parts)
    first = np.concatenate(first_parts)
    length = np.concatenate(len_parts)
    total = int(length.sum())
    if total == 0:
        return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64)
    run_offset = np.cumsum(length) - length  # where each run starts among the pairs
    pair_q = np.repeat(q, length)
    pair_item = np.repeat(first - run_offset, length) + np.arange(total, dtype=np.int64)
    return pair_q, pair_item


def sense(ents: Sequence[Any], egrid: SpatialGrid, rgrid: SpatialGrid, sense_radius: float) -> Sensed:
    """Neighbour counts and nearest resources of ``ents`` (entities with ``x``, ``y``)."""
    n = len(ents)
    nan = np.full(n, np.nan)
    if n == 0:
        return Sensed(np.zeros(0, dtype=np.int64), nan, nan.copy(), nan.copy())
    r2 = sense_radius * sense_radius
    qx = np.fromiter(map(_X, ents), dtype=np.float64, count=n)
    qy = np.fromiter(map(_Y, ents), dtype=np.float64, count=n)
    # int() truncates toward zero, as astype does; negatives clamp to 0 either way.
    qcx = np.clip((qx * egrid.inv).astype(np.int64), 0, egrid.cols - 1)
    qcy = np.clip((qy * egrid.inv).astype(np.int64), 0, egrid.rows - 1)

    earr = _GridArrays(egrid, with_ids=False)
    pq, pi = _pairs(qcx, qcy, egrid, earr)
    dx = earr.x[pi] - qx[pq]
    dy = earr.y[pi] - qy[pq]
    within = dx * dx + dy * dy <= r2
    # The entity itself is in its own block at distance 0: one less, never below zero.
    neighbors = np.maximum(np.bincount(pq[within], minlength=n) - 1, 0)

    ndx, ndy, nd = nan, nan.copy(), nan.copy()
    if rgrid.cells:
        rarr = _GridArrays(rgrid, with_ids=True)
        pq, pi = _pairs(qcx, qcy, rgrid, rarr)
        dx = rarr.x[pi] - qx[pq]
        dy = rarr.y[pi] - qy[pq]
        d2 = dx * dx + dy * dy
        hit = d2 <= r2
        if hit.any():
            pq, dx, dy, d2, rid = pq[hit], dx[hit], dy[hit], d2[hit], rarr.ids[pi[hit]]
            # per query: smallest distance, then lowest id (a resource is at most once among a
            # query's candidates, so exactly one pair per query is left)
            best = np.full(n, np.inf)
            np.minimum.at(best, pq, d2)
            tie = d2 == best[pq]
            pq, dx, dy, rid = pq[tie], dx[tie], dy[tie], rid[tie]
            low = np.full(n, _ID_MAX)
            np.minimum.at(low, pq, rid)
            pick = rid == low[pq]
            who = pq[pick]
            ndx[who] = dx[pick]
            ndy[who] = dy[pick]
            nd[who] = np.sqrt(best[who])
    return Sensed(neighbors, ndx, ndy, nd)
