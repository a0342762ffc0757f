"""The fixed cost of a small world's tick: ``World.trait_views`` + ``World.step`` on the sandbox
test world (``World(WorldParams(), seed=7)``: 40 entities, one trait carried by all), as every
sandbox test runs it 50 times.

    python -m bench.world_tick
    python -m bench.world_tick --base ../genesis-old   # side by side with another checkout's engine

Prints one JSON object: per tick, the median thread CPU time (ms) of ``trait_views`` (the
sandbox's base64 form) and of ``step``, over ``--worlds`` fresh worlds of ``--ticks`` ticks each.
The host's reply is stood in for by fixed intents built here (every entity sets its direction,
every third one also moves), encoded and decoded as the trait host's are — no trait code runs.
With ``--base``: the same for the ``engine`` package of that checkout, stepped in lockstep (the
two alternate tick by tick, so both see the same machine), ``ratio`` = base / this tree, and
``same_state`` = whether both worlds ended with the same state hash (they must).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from engine.core import world as this_world
from genesis.trait_wire import IntentColumns, decode_intents
from sandbox.traithost import wire as trait_host


def load_engine(checkout: str) -> Any:
    """The world module of another checkout (``engine.core.world``, or ``engine.world`` in a checkout
    whose engine is one flat package), imported under a name of its own."""
    path = Path(checkout) / "engine"
    spec = importlib.util.spec_from_file_location(
        "engine_base", path / "__init__.py", submodule_search_locations=[str(path)]
    )
    if spec is None or spec.loader is None:
        raise SystemExit(f"no engine package in {checkout}")
    package = importlib.util.module_from_spec(spec)
    sys.modules["engine_base"] = package
    spec.loader.exec_module(package)
    flat = not (path / "core" / "world.py").exists()
    return importlib.import_module("engine_base.world" if flat else "engine_base.core.world")


def stand_in_intents(world: Any) -> IntentColumns:
    """What a wandering trait's host would answer for ``world``'s entities this tick."""
    merged = {
        eid: [["set", "direction", math.sin(eid * 0.3 + world.tick * 0.07)]]
        + ([["move", 1.0, -0.5]] if eid % 3 == 0 else [])
        for eid in sorted(world.entities)
    }
    return decode_intents(trait_host.encode_intents(merged))


def run(worlds: int, ticks: int, seed: int, base: Any | None) -> dict[str, Any]:
    modules = {"this": this_world} | ({"base": base} if base is not None else {})
    times: dict[str, dict[str, list[float]]] = {name: {"views": [], "step": []} for name in modules}
    same_state = True
    population = 0
    cpu = time.thread_time
    for r in range(worlds):
        live = {name: mod.World(mod.WorldParams(), seed=seed) for name, mod in modules.items()}
        for w in live.values():
            w.give_trait_to_all("wander")
        for tick in range(ticks):
            intents = stand_in_intents(live["this"])
            order = list(live) if (r + tick) % 2 else list(reversed(live))
            for name in order:
                w = live[name]
                it = (
                    intents
                    if name == "this"
                    else base.IntentColumns(
                        intents.entity,
                        intents.kind,
                        intents.attr,
                        intents.a,
                        intents.b,
                        intents.names,
                        intents.over_a,
                        intents.over_b,
                    )
                )
                t0 = cpu()
                w.trait_views(["wander"])
                t1 = cpu()
                w.step(it)
                t2 = cpu()
                times[name]["views"].append(t1 - t0)
                times[name]["step"].append(t2 - t1)
        population = len(live["this"].entities)
        if base is not None:
            same_state &= live["this"].state_hash() == live["base"].state_hash()
    out: dict[str, Any] = {"worlds": worlds, "ticks": ticks, "entities_at_end": population}
    for name, parts in times.items():
        views = statistics.median(parts["views"]) * 1000
        step = statistics.median(parts["step"]) * 1000
        out[name] = {"trait_views_ms": round(views, 4), "step_ms": round(step, 4), "tick_ms": round(views + step, 4)}
    if base is not None:
        out["ratio"] = {key: round(out["base"][key] / out["this"][key], 3) for key in out["this"]}
        out["same_state"] = same_state
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worlds", type=int, default=30)
    ap.add_argument("--ticks", type=int, default=50)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument(
        "--base", help="another checkout whose engine/ to compare with (e.g. a git worktree of an older commit)"
    )
    args = ap.parse_args(argv)
    base = load_engine(args.base) if args.base else None
    print(json.dumps(run(args.worlds, args.ticks, args.seed, base), indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
