"""The engine's grid queries (engine/core/sensing.py) against brute force over every pair of points,
with the same float operations: the same answers bit for bit on awkward layouts (twins, points
on cell edges and world borders, shuffled ids). Pure: no services."""

from __future__ import annotations

import numpy as np
import pytest

from engine.core import sensing
from engine.core.sensing import Grid, Layout

WIDTH, HEIGHT = 800.0, 600.0


def awkward_points(rng: np.random.Generator, n: int, cell: float) -> tuple[np.ndarray, np.ndarray]:
    """Uniform points, plus duplicates (a newborn sits on its parent), points exactly on cell
    edges and on the world's borders (0 and just below width/height)."""
    x = rng.uniform(0.0, WIDTH, n)
    y = rng.uniform(0.0, HEIGHT, n)
    if n >= 4:
        twins = rng.choice(n, n // 4, replace=False)
        x[twins[1:]], y[twins[1:]] = x[twins[:-1]], y[twins[:-1]]
        edges = rng.choice(n, n // 6, replace=False)
        x[edges] = np.floor(x[edges] / cell) * cell
        y[edges[::2]] = np.floor(y[edges[::2]] / cell) * cell
        border = rng.choice(n, max(1, n // 20), replace=False)
        x[border[::2]] = 0.0
        x[border[1::2]] = np.nextafter(WIDTH, 0.0)
        y[border[::3]] = np.nextafter(HEIGHT, 0.0)
        y[border[1::3]] = 0.0
    return x, y


def squared_distances(qx, qy, px, py) -> np.ndarray:
    """Every (query, point) pair, as the engine computes it: dx = px - qx, dx*dx + dy*dy."""
    dx = px[None, :] - qx[:, None]
    dy = py[None, :] - qy[:, None]
    return dx * dx + dy * dy


def brute_nearest(qx, qy, px, py, ids, radius):
    """Per query: the point with the smallest squared distance within radius, ties by lower id."""
    d2 = squared_distances(qx, qy, px, py)
    d2[d2 > radius * radius] = np.inf
    closest = d2.min(axis=1, initial=np.inf)
    found = np.isfinite(closest)
    tied = np.where(d2 == closest[:, None], ids[None, :], np.iinfo(np.int64).max)
    best = tied.argmin(axis=1) if len(ids) else np.zeros(len(qx), dtype=np.int64)
    rows = np.arange(len(qx))[found]
    out_ids = np.full(len(qx), -1, dtype=np.int64)
    ndx, ndy = np.full(len(qx), np.nan), np.full(len(qx), np.nan)
    out_ids[rows] = ids[best[rows]]
    ndx[rows] = px[best[rows]] - qx[rows]
    ndy[rows] = py[best[rows]] - qy[rows]
    return out_ids, ndx, ndy


def brute_close_pairs(px, py, ids, radius) -> np.ndarray:
    """Every pair closer than radius, as rows (lower-id index, higher-id index), sorted."""
    d2 = squared_distances(px, py, px, py)
    return np.stack(((d2 < radius * radius) & (ids[:, None] < ids[None, :])).nonzero(), axis=1)


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64) if a.dtype.kind == "f" else a


def assert_same(got, expected) -> None:
    """Same arrays: dtype, shape, order and every bit (NaN where NaN)."""
    if isinstance(expected, tuple):
        assert len(got) == len(expected)
        for g, e in zip(got, expected):
            assert_same(g, e)
        return
    assert got.dtype == expected.dtype and got.shape == expected.shape
    assert np.array_equal(bits(got), bits(expected))


CASES = [
    pytest.param(seed, n, radius, sorted_ids, id=f"{n}pts-r{radius}-{'sorted' if sorted_ids else 'shuffled'}")
    for seed, (n, radius, sorted_ids) in enumerate(
        [
            (0, 80.0, True),
            (1, 80.0, True),
            (2, 6.0, False),
            (60, 37.5, True),
            (600, 80.0, True),
            (600, 80.0, False),
            (2500, 20.0, False),
            (2500, 2.0, True),
            (1500, 150.0, False),
        ]
    )
]


@pytest.mark.parametrize("seed, n, radius, sorted_ids", CASES)
def test_grid_queries_equal_brute_force(seed, n, radius, sorted_ids) -> None:
    rng = np.random.default_rng(seed)
    x, y = awkward_points(rng, n, radius)
    ids = np.arange(1, n + 1, dtype=np.int64) if sorted_ids else rng.permutation(n).astype(np.int64) * 3 + 7
    lay = Layout(Grid.over(WIDTH, HEIGHT, radius), x, y, ids)
    near = Layout(Grid.over(WIDTH, HEIGHT, radius / 2), x, y, ids)
    # queries: fresh points, the layout's own points (distance 0), and none
    qx, qy = awkward_points(rng, 300, radius)
    qx, qy = np.concatenate([qx, x[: n // 2]]), np.concatenate([qy, y[: n // 2]])
    found_any = []
    for query_x, query_y in ((qx, qy), (qx[:0], qy[:0]), (qx[:1], qy[:1])):
        for r in (radius, radius * 0.5, radius * 0.99):
            expected = brute_nearest(query_x, query_y, x, y, ids, r)
            assert_same(sensing.nearest(query_x, query_y, lay, r), expected)
            assert_same(sensing.nearest(query_x, query_y, lay, r, near), expected)
            within = (squared_distances(query_x, query_y, x, y) <= r * r).sum(axis=1).astype(np.int64)
            assert_same(sensing.count_within(query_x, query_y, lay, r * r), within)
            found_any.append(expected[0])
    for r in (radius, radius * 0.5, radius / 3):
        counts = (squared_distances(x, y, x, y) <= r * r).sum(axis=1).astype(np.int64) - 1  # less the point itself
        assert_same(sensing.neighbour_counts(lay, r), counts)
        low, high = sensing.close_pairs(lay, r)
        assert low.dtype == high.dtype == np.int64
        pairs = np.stack((low, high), axis=1)[np.lexsort((high, low))]
        assert np.array_equal(pairs, brute_close_pairs(x, y, ids, r))  # each pair once, lower id first
    if n > 100:  # the layouts were dense enough to exercise every branch
        assert (np.concatenate(found_any) >= 0).any()
        assert len(pairs) and (counts > 0).any()
