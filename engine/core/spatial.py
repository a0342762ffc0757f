"""Uniform grid spatial hash for the world core.

Items are any objects with ``id``, ``x`` and ``y`` attributes (entities and resources).
Cells are keyed by a single int (``row * cols + col``); positions outside the world are
clamped to the border cells, so every item always lands in a valid cell.

Queries return *candidates* from the cells overlapping the query's bounding box; the exact
distance test is the caller's (or one of the helpers below). Everything here is
deterministic: cells are lists in insertion order and nothing iterates over a set.
"""

from __future__ import annotations

import math
from typing import Any


class SpatialGrid:
    __slots__ = ("cell", "inv", "cols", "rows", "cells")

    def __init__(self, width: float, height: float, cell: float) -> None:
        if not cell > 0:
            raise ValueError("cell size must be > 0")
        self.cell = float(cell)
        self.inv = 1.0 / self.cell
        self.cols = max(1, math.ceil(width / self.cell))
        self.rows = max(1, math.ceil(height / self.cell))
        self.cells: dict[int, list[Any]] = {}

    # -- maintenance ------------------------------------------------------------------------

    def key(self, x: float, y: float) -> int:
        cx = int(x * self.inv)
        cy = int(y * self.inv)
        if cx < 0:
            cx = 0
        elif cx >= self.cols:
            cx = self.cols - 1
        if cy < 0:
            cy = 0
        elif cy >= self.rows:
            cy = self.rows - 1
        return cy * self.cols + cx

    def clear(self) -> None:
        self.cells = {}

    def insert(self, item: Any) -> None:
        k = self.key(item.x, item.y)
        bucket = self.cells.get(k)
        if bucket is None:
            self.cells[k] = [item]
        else:
            bucket.append(item)

    def remove(self, item: Any) -> None:
        """Remove ``item`` (it must still be at the position it was inserted with)."""
        bucket = self.cells.get(self.key(item.x, item.y))
        if bucket is not None:
            try:
                bucket.remove(item)
            except ValueError:
                pass
            else:
                return
        # Fallback: the item moved since it was inserted; find it anywhere.
        for bucket in self.cells.values():
            if item in bucket:
                bucket.remove(item)
                return

    def candidates(self, x: float, y: float, r: float) -> list[Any]:
        """Items in every cell overlapping the square [x-r, x+r] x [y-r, y+r].

        When that square lies in one cell the cell's own list is returned: do not mutate it.
        """
        inv = self.inv
        cols = self.cols
        rows = self.rows
        cx0 = int((x - r) * inv)
        cx1 = int((x + r) * inv)
        cy0 = int((y - r) * inv)
        cy1 = int((y + r) * inv)
        # Clamp both ends (float rounding can put a point just below the edge one cell out).
        cx0 = 0 if cx0 < 0 else (cols - 1 if cx0 >= cols else cx0)
        cx1 = 0 if cx1 < 0 else (cols - 1 if cx1 >= cols else cx1)
        cy0 = 0 if cy0 < 0 else (rows - 1 if cy0 >= rows else cy0)
        cy1 = 0 if cy1 < 0 else (rows - 1 if cy1 >= rows else cy1)
        cells = self.cells
        if cx0 == cx1 and cy0 == cy1:
            return cells.get(cy0 * cols + cx0) or []
        out: list[Any] = []
        for cy in range(cy0, cy1 + 1):
            base = cy * cols
            for cx in range(cx0, cx1 + 1):
                bucket = cells.get(base + cx)
                if bucket:
                    out.extend(bucket)
        return out

    def nearest(self, x: float, y: float, r: float) -> tuple[Any, float] | None:
        """Nearest item with distance <= r as ``(item, squared distance)``; ties by lower id."""
        best = None
        best_d2 = r * r
        best_id = 0
        for item in self.candidates(x, y, r):
            dx = item.x - x
            dy = item.y - y
            d2 = dx * dx + dy * dy
            if d2 < best_d2 or (d2 == best_d2 and (best is None or item.id < best_id)):
                best = item
                best_d2 = d2
                best_id = item.id
        if best is None:
            return None
        return best, best_d2

    def count_within(self, x: float, y: float, r: float, exclude: Any = None) -> int:
        """Number of items with distance <= r, not counting ``exclude`` (compared by identity)."""
        r2 = r * r
        n = 0
        for item in self.candidates(x, y, r):
            if item is exclude:
                continue
            dx = item.x - x
            dy = item.y - y
            if dx * dx + dy * dy <= r2:
                n += 1
        return n
