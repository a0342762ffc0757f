"""The compiled grid queries (engine/grid_kernels.pyx) against their oracle, engine/sensing.py's
numpy code: the same answers bit for bit on awkward layouts, the same worlds, and a clean
fallback to numpy when the build is missing or stale."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine import sensing
from engine.sensing import Grid, Layout
from engine.world import World, WorldParams
from genesis import native

ROOT = Path(__file__).resolve().parents[2]
PROBLEM = native.compiled_problem("engine.grid_kernels")
needs_build = pytest.mark.skipif(PROBLEM is not None, reason=f"compiled grid queries {PROBLEM}")
WIDTH, HEIGHT = 800.0, 600.0


def bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.int64) if a.dtype.kind == "f" else a


def assert_same(compiled, oracle) -> None:
    """Same arrays: dtype, shape, order and every bit (NaN where NaN)."""
    if isinstance(oracle, tuple):
        assert len(compiled) == len(oracle)
        for c, o in zip(compiled, oracle):
            assert_same(c, o)
        return
    assert compiled.dtype == oracle.dtype and compiled.shape == oracle.shape
    assert np.array_equal(bits(compiled), bits(oracle))


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


def layouts(seed: int, n: int, radius: float, sorted_ids: bool):
    rng = np.random.default_rng(seed)
    x, y = awkward_points(rng, n, radius)
    ids = np.arange(1, n + 1, dtype=np.int64) if sorted_ids else rng.permutation(n).astype(np.int64) * 3 + 7
    return rng, x, y, ids


CASES = [pytest.param(seed, n, radius, sorted_ids, id=f"{n}pts-r{radius}-{'sorted' if sorted_ids else 'shuffled'}")
         for seed, (n, radius, sorted_ids) in enumerate([
             (0, 80.0, True), (1, 80.0, True), (2, 6.0, False), (3, 80.0, False), (60, 37.5, True),
             (600, 80.0, True), (600, 80.0, False), (2500, 20.0, False), (2500, 2.0, True), (4000, 150.0, False)])]


@needs_build
@pytest.mark.parametrize("seed, n, radius, sorted_ids", CASES)
def test_compiled_queries_are_bit_identical_to_numpy(seed, n, radius, sorted_ids) -> None:
    rng, x, y, ids = layouts(seed, n, radius, sorted_ids)
    lay = Layout(Grid.over(WIDTH, HEIGHT, radius), x, y, ids)

    near = Layout(Grid.over(WIDTH, HEIGHT, radius / 2), x, y, ids)
    # queries: fresh points, the layout's own points (distance 0), and none
    qx, qy = awkward_points(rng, 300, radius)
    qx, qy = np.concatenate([qx, x[: n // 2]]), np.concatenate([qy, y[: n // 2]])
    found_any = []
    for query_x, query_y in ((qx, qy), (qx[:0], qy[:0]), (qx[:1], qy[:1])):
        for r in (radius, radius * 0.5, radius * 0.99):
            with sensing.numpy_queries():
                expected_nearest = sensing.nearest(query_x, query_y, lay, r)
                expected_two = sensing.nearest(query_x, query_y, lay, r, near)
                expected_within = sensing.count_within(query_x, query_y, lay, r * r)
            assert_same(sensing.nearest(query_x, query_y, lay, r), expected_nearest)
            assert_same(sensing.nearest(query_x, query_y, lay, r, near), expected_two)
            assert_same(sensing.count_within(query_x, query_y, lay, r * r), expected_within)
            found_any.append(expected_nearest[0])
    for r in (radius, radius * 0.5, radius / 3):
        with sensing.numpy_queries():
            expected_counts = sensing.neighbour_counts(lay, r)
            expected_pairs = sensing.close_pairs(lay, r)
        assert_same(sensing.neighbour_counts(lay, r), expected_counts)
        assert_same(sensing.close_pairs(lay, r), expected_pairs)
    if n > 100:  # the layouts were dense enough to exercise every branch
        found = np.concatenate(found_any)
        assert (found >= 0).any()
        assert len(expected_pairs[0]) > 0 and (expected_counts > 0).any()


@needs_build
def test_the_public_queries_run_compiled_when_built() -> None:
    assert "engine.grid_kernels" in native.COMPILED
    assert sensing.KERNELS is not None and sensing.KERNELS.__name__ == "engine._grid_kernels_native"
    with sensing.numpy_queries():
        assert sensing.KERNELS is None
    assert sensing.KERNELS is not None


def run_world(seed: int, ticks: int) -> tuple[str, int, int]:
    # crowded and hungry: births, deaths, collisions and contested resources every tick
    params = replace(WorldParams(), width=500.0, height=400.0, initial_population=300, max_population=600,
                     initial_resources=200, max_resources=400, resource_spawn_chance=1.0, collision_radius=6.0,
                     eat_radius=10.0, maturity_age=5, reproduction_threshold=50.0, initial_energy=90.0, max_age=80)
    w = World(params, seed=seed)
    births = 0
    for _ in range(ticks):
        births += len(w.step().births)
    return w.state_hash(), births, w.stats()["collisions"]


@needs_build
def test_worlds_are_the_same_compiled_or_numpy() -> None:
    compiled = run_world(11, 60)
    with sensing.numpy_queries():
        oracle = run_world(11, 60)
    assert compiled == oracle
    assert compiled[1] > 0 and compiled[2] > 0


FALLBACK_PROBE = """
import logging, sys
logging.basicConfig(level=logging.WARNING)
sys.path.insert(0, "{tests}")
from engine import sensing
from test_grid_kernels import run_world
print(sensing.KERNELS is None, *run_world(11, 60))
"""


@needs_build
@pytest.mark.parametrize("change", ["none", "source_edited", "extension_missing"])
def test_a_stale_or_missing_build_falls_back_to_numpy_and_says_so(tmp_path: Path, change: str) -> None:
    """Copies of the engine and genesis packages, changed as named, run by a fresh interpreter:
    the world it steps is the same as the compiled one here."""
    for package in ("engine", "genesis"):
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "migrations"))
    if change == "source_edited":
        with open(tmp_path / "engine" / "grid_kernels.pyx", "a") as source:
            source.write("\n# edited after the build\n")
    elif change == "extension_missing":
        for extension in (tmp_path / "engine").glob("_grid_kernels_native.*.so"):
            extension.unlink()
    # -S: without the site hook the venv's editable-install finder (which maps the packages to the
    # checkout) is not installed, so the copies are imported; the venv's packages stay reachable.
    site_packages = sysconfig.get_paths()["purelib"]
    probe = FALLBACK_PROBE.format(tests=Path(__file__).resolve().parent)
    done = subprocess.run([sys.executable, "-S", "-c", probe], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{site_packages}"})
    assert done.returncode == 0, done.stderr
    fallback, state, births, collisions = done.stdout.split()
    assert (state, int(births), int(collisions)) == run_world(11, 60)
    if change == "none":
        assert fallback == "False"
        assert "numpy grid queries" not in done.stderr
    else:
        assert fallback == "True"
        reason = "stale" if change == "source_edited" else "not built"
        assert f"engine.grid_kernels: using the numpy grid queries, the compiled build is {reason}" in done.stderr
        assert done.stderr.count("the numpy grid queries") == 1, done.stderr  # logged once
