"""The engine's grid queries compiled (engine/grid_kernels.pyx) vs numpy (engine/sensing.py), side by side.

    python -m bench.grid_kernels
    python -m bench.grid_kernels --entities 500,5000 --ticks 60

Needs the compiled build (``make venv``). On the bench world of ``bench.engine`` (its
``world_params``: the default density scaled to N, 3 traits carried by all), after ``--settle``
ticks, prints one JSON object keyed by N with:

- ``queries``: per query as the world runs it — ``neighbour_counts`` (every entity's neighbours
  within sense_radius), ``nearest_resource`` (every entity's nearest resource, two steps where
  the world uses them), ``eat_search`` (nearest resource within eat_radius, every entity an
  eater), ``close_pairs`` (collisions), ``count_within`` (neighbours of queries that are not the
  layout's points) — the median wall time of one call (``compiled_us``, ``numpy_us``, the two
  interleaved call by call), ``ratio`` = numpy / compiled, and ``identical``: the answers agree
  bit for bit (they must).
- ``world``: two worlds of the same seed stepped in lockstep for ``--ticks`` ticks, one on each
  implementation (``World.trait_views(raw=True)`` + ``World.step`` with stand-in intents as in
  ``bench.world_tick``; no trait code runs), median thread CPU ms per tick of each part,
  ``ratio`` = numpy / compiled, and ``same_state``: both ended with the same state hash (they must).

Wall-clock figures on a shared machine are noisy: compare the ratios of one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext
from typing import Any, Callable

import numpy as np

from bench.engine import build_world
from bench.world_tick import stand_in_intents
from engine import sensing
from engine.sensing import Layout

TRAITS = ["wander", "forage", "flock"]


def same(a: Any, b: Any) -> bool:
    """Bit-for-bit equality of arrays (NaN == NaN) or tuples of them."""
    if isinstance(a, tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
        a, b = a.view(np.int64), b.view(np.int64)
    return a.shape == b.shape and bool(np.array_equal(a, b))


def side_by_side(call: Callable[[], Any], repeats: int) -> dict[str, Any]:
    compiled_times, numpy_times = [], []
    clock = time.perf_counter
    for _ in range(repeats):
        t0 = clock()
        compiled = call()
        t1 = clock()
        with sensing.numpy_queries():
            t2 = clock()
            oracle = call()
            t3 = clock()
        compiled_times.append(t1 - t0)
        numpy_times.append(t3 - t2)
    c, n = statistics.median(compiled_times) * 1e6, statistics.median(numpy_times) * 1e6
    return {"compiled_us": round(c, 1), "numpy_us": round(n, 1), "ratio": round(n / c, 2),
            "identical": same(compiled, oracle)}


def queries(n: int, settle: int, repeats: int, seed: int) -> dict[str, Any]:
    world = build_world(n, TRAITS, seed)
    for _ in range(settle):
        world.step(stand_in_intents(world))
    p = world.params
    ents = [world.entities[i] for i in sorted(world.entities)]
    x = np.array([e.x for e in ents])
    y = np.array([e.y for e in ents])
    ids = np.array([e.id for e in ents], dtype=np.int64)
    entities = world._entity_layout()
    resources = world._resource_layout()
    near = world._near_resources_for(len(ents))
    eat = world._resource_near_layout()
    collide = Layout(world._near_grid, x, y, ids)
    r2 = p.sense_radius * p.sense_radius
    return {
        "entities": len(ents), "resources": len(resources), "two_step_nearest": near is not None,
        "queries": {
            "neighbour_counts": side_by_side(lambda: sensing.neighbour_counts(entities, p.sense_radius), repeats),
            "nearest_resource": side_by_side(lambda: sensing.nearest(x, y, resources, p.sense_radius, near), repeats),
            "eat_search": side_by_side(lambda: sensing.nearest(x, y, eat, p.eat_radius), repeats),
            "close_pairs": side_by_side(lambda: sensing.close_pairs(collide, p.collision_radius), repeats),
            "count_within": side_by_side(lambda: sensing.count_within(x, y, entities, r2), repeats),
        },
    }


def lockstep(n: int, ticks: int, seed: int) -> dict[str, Any]:
    worlds = {"compiled": build_world(n, TRAITS, seed), "numpy": build_world(n, TRAITS, seed)}
    times: dict[str, dict[str, list[float]]] = {name: {"views": [], "step": []} for name in worlds}
    cpu = time.thread_time
    for tick in range(ticks):
        intents = stand_in_intents(worlds["compiled"])
        for name in (["compiled", "numpy"] if tick % 2 else ["numpy", "compiled"]):
            w = worlds[name]
            with sensing.numpy_queries() if name == "numpy" else nullcontext():
                t0 = cpu()
                w.trait_views(TRAITS, raw=True)
                t1 = cpu()
                w.step(intents)
                t2 = cpu()
            times[name]["views"].append(t1 - t0)
            times[name]["step"].append(t2 - t1)
    out: dict[str, Any] = {"ticks": ticks}
    for name, parts in times.items():
        views = statistics.median(parts["views"]) * 1000
        step = statistics.median(parts["step"]) * 1000
        out[name] = {"trait_views_ms": round(views, 3), "step_ms": round(step, 3), "tick_ms": round(views + step, 3)}
    out["ratio"] = {key: round(out["numpy"][key] / out["compiled"][key], 2) for key in out["compiled"]}
    out["same_state"] = worlds["compiled"].state_hash() == worlds["numpy"].state_hash()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--entities", default="500,5000", help="comma-separated sizes")
    ap.add_argument("--settle", type=int, default=20, help="ticks stepped before the queries are timed")
    ap.add_argument("--repeats", type=int, default=41, help="calls timed per query and implementation")
    ap.add_argument("--ticks", type=int, default=60, help="lockstep ticks per world")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    if sensing.KERNELS is None:
        print("the compiled grid queries are not built: run `make venv`", file=sys.stderr)
        return 1
    out = {}
    for n in (int(part) for part in args.entities.split(",")):
        out[str(n)] = queries(n, args.settle, args.repeats, args.seed) | {"world": lockstep(n, args.ticks, args.seed)}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
