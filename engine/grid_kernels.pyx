# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Compiled grid queries for engine/sensing.py: the same answers as its numpy code, bit for bit.

Cython source, not pure-Python mode: the fallback when this is not built is sensing.py's numpy
code (vectorised, fast enough to run), not this file interpreted (loops a hundred times slower).
Built by scripts/build_native.py (``make venv``) into ``engine/_grid_kernels_native.*.so``, with
``-ffp-contract=off``: ``dx*dx + dy*dy`` is rounded twice, as numpy does, never fused.

Every function takes a layout's arrays (see sensing.Layout: points sorted by cell, row-major,
``start`` = each cell's [first, length)) and its grid's ``cols`` x ``rows``, and visits, per query,
the cells of its block (``Grid.block``) in order and each cell's points in order: exactly the
(query, point) pairs sensing.pairs() lists, so the same candidates in the same order. The cells
of one row of a block are adjacent, so their points are one run of the layout: a block is at most
3 runs (cells outside the grid are empty in numpy's block, and left out here). Per pair
``dx = x[point] - qx[query]`` (the numpy operand order).
"""

from libc.stdint cimport int64_t
from libc.stdlib cimport free, malloc, realloc

import numpy as np


cdef inline double squared(double px, double py, double qx, double qy) noexcept nogil:
    """``dx*dx + dy*dy`` with ``dx = px - qx``, ``dy = py - qy``: numpy's expression and rounding."""
    cdef double dx = px - qx, dy = py - qy
    return dx * dx + dy * dy


cdef inline int block_runs(const int64_t[:, ::1] start, int64_t cols, int64_t rows, int64_t cell,
                           bint forward, int64_t* runs) noexcept nogil:
    """The [first, end) runs (into ``runs``, flat) of the rows of ``cell``'s block, in the order
    of ``Grid.block(forward)``: rows -1, 0, +1 of columns -1..+1 (``forward``: row 0 from the
    cell's own column, then row +1), clamped to the grid; returns how many."""
    cdef int64_t cx = cell % cols, cy = cell // cols, dy, row, lo, hi
    cdef int count = 0
    for dy in range(0 if forward else -1, 2):
        row = cy + dy
        if row < 0 or row >= rows:
            continue
        lo = cx if forward and dy == 0 else cx - 1
        hi = cx + 1
        if lo < 0:
            lo = 0
        if hi >= cols:
            hi = cols - 1
        runs[2 * count] = start[0, row * cols + lo]
        runs[2 * count + 1] = start[0, row * cols + hi] + start[1, row * cols + hi]
        count += 1
    return count


def neighbour_counts(const double[::1] x, const double[::1] y, const int64_t[::1] keys,
                     const int64_t[::1] index, const int64_t[:, ::1] start, int64_t cols, int64_t rows,
                     double r2):
    """Per point (in the order the layout was built from), the other points with d2 <= r2. The
    pairs of forward blocks (sensing.neighbour_counts): a pair in two cells counts for both."""
    cdef Py_ssize_t n = x.shape[0], i
    cdef int64_t j, k
    cdef int64_t runs[6]  # block_runs()
    cdef int r, nruns
    counts = np.zeros(n, dtype=np.int64)
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] c = counts
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(n):
            k = keys[i]
            nruns = block_runs(start, cols, rows, k, True, runs)
            for r in range(nruns):
                for j in range(runs[2 * r], runs[2 * r + 1]):
                    if squared(x[j], y[j], x[i], y[i]) <= r2:
                        c[i] += 1
                        if keys[j] != k:
                            c[j] += 1
        for i in range(n):
            o[index[i]] = c[i] - 1  # less the point itself
    return out


def count_within(const double[::1] qx, const double[::1] qy, const int64_t[::1] qcells,
                 const double[::1] x, const double[::1] y, const int64_t[:, ::1] start, int64_t cols,
                 int64_t rows, double r2):
    """Per query, the points of its cell's block with d2 <= r2."""
    cdef Py_ssize_t n = qx.shape[0], i
    cdef int64_t j, count
    cdef int64_t runs[6]  # block_runs()
    cdef int r, nruns
    out = np.empty(n, dtype=np.int64)
    cdef int64_t[::1] o = out
    with nogil:
        for i in range(n):
            count = 0
            nruns = block_runs(start, cols, rows, qcells[i], False, runs)
            for r in range(nruns):
                for j in range(runs[2 * r], runs[2 * r + 1]):
                    count += squared(x[j], y[j], qx[i], qy[i]) <= r2
            o[i] = count
    return out


def nearest(const double[::1] qx, const double[::1] qy, const int64_t[::1] qcells,
            const double[::1] x, const double[::1] y, const int64_t[::1] ids,
            const int64_t[:, ::1] start, int64_t cols, int64_t rows, double r2,
            int64_t[::1] found, double[::1] ndx, double[::1] ndy):
    """For each query with ``found`` < 0: the point of its block with the smallest d2 <= r2 (ties
    by lower id), written as its id and dx, dy into ``found``, ``ndx``, ``ndy``. Queries already
    answered are skipped, so two calls make sensing.nearest's two-step search."""
    cdef Py_ssize_t n = qx.shape[0], i
    cdef int64_t j, best
    cdef int64_t runs[6]  # block_runs()
    cdef int r, nruns
    cdef double d2, best_d2
    with nogil:
        for i in range(n):
            if found[i] >= 0:
                continue
            best = -1
            best_d2 = 0.0
            nruns = block_runs(start, cols, rows, qcells[i], False, runs)
            for r in range(nruns):
                for j in range(runs[2 * r], runs[2 * r + 1]):
                    d2 = squared(x[j], y[j], qx[i], qy[i])
                    if d2 <= r2 and (best < 0 or d2 < best_d2 or (d2 == best_d2 and ids[j] < ids[best])):
                        best = j
                        best_d2 = d2
            if best >= 0:
                found[i] = ids[best]
                ndx[i] = x[best] - qx[i]
                ndy[i] = y[best] - qy[i]


cdef void fill_pairs(int64_t[::1] lo, int64_t[::1] hi, const int64_t* pairs, Py_ssize_t size) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(size):
        lo[k] = pairs[2 * k]
        hi[k] = pairs[2 * k + 1]


def close_pairs(const double[::1] x, const double[::1] y, const int64_t[::1] ids,
                const int64_t[::1] keys, const int64_t[::1] index, const int64_t[:, ::1] start,
                int64_t cols, int64_t rows, double r2):
    """Every pair with d2 < r2, once (from the lower id to the higher), as (lower-id index,
    higher-id index) into the arrays the layout was built from, in sensing.close_pairs' order."""
    cdef Py_ssize_t n = x.shape[0], i
    cdef Py_ssize_t size = 0, capacity = 256
    cdef int64_t j
    cdef int64_t runs[6]  # block_runs()
    cdef int r, nruns
    cdef int64_t* pairs = <int64_t*> malloc(2 * capacity * sizeof(int64_t))  # (lo, hi) interleaved
    cdef int64_t* grown
    if pairs == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(n):
                nruns = block_runs(start, cols, rows, keys[i], False, runs)
                for r in range(nruns):
                    for j in range(runs[2 * r], runs[2 * r + 1]):
                        if ids[j] <= ids[i]:
                            continue
                        if squared(x[j], y[j], x[i], y[i]) < r2:
                            if size == capacity:
                                grown = <int64_t*> realloc(pairs, 4 * capacity * sizeof(int64_t))
                                if grown == NULL:
                                    with gil:
                                        raise MemoryError()
                                pairs = grown
                                capacity *= 2
                            pairs[2 * size] = index[i]
                            pairs[2 * size + 1] = index[j]
                            size += 1
        lo = np.empty(size, dtype=np.int64)
        hi = np.empty(size, dtype=np.int64)
        fill_pairs(lo, hi, pairs, size)
        return lo, hi
    finally:
        free(pairs)

