"""Soak: many live traits of many agents in the real engine loop, paced at its tick rate, for minutes.

    python -m bench.soak --minutes 10 --traits 60 --agents 20
    python -m bench.soak --minutes 10 --fast-forward   # the same, unpaced (GENESIS_ENGINE_FAST_FORWARD)
    python -m bench.soak --hostile --minutes 1 --kinds stateless,stateful   # hostile agents, side by side

The traits (each passed through the gatekeeper) are of three kinds, in turn: stateless, stateful
within bounds (a short per-entity history), and heavy but legal (a bounded loop of math per call).
They belong to ``--agents`` agents, so the trait host runs a process per agent. The engine runs
its fixed-timestep loop (``Engine.run``) on the default world, every initial entity carrying up
to five of the traits (newborns inherit them), for ``--minutes``.

Prints one JSON object:

- ``ticks_per_s_p50`` / ``_p1``: ticks in each whole second (the first ``--warmup-s`` excluded).
- ``host_memory_mb_start`` / ``_end`` / ``_growth_pct`` / ``_slope_mb_per_min``: the trait-host
  container's anonymous memory (its cgroup, as the kernel counts it for the OOM killer), sampled
  every ``--sample-s`` after the warm-up; the slope is a least-squares line.
- ``host_processes``: the host's worker processes at the end (one per agent, plus suspects).
- ``workers_cpu_ms_per_tick``: the CPU all worker processes used per tick after the warm-up.
- ``host_restarts``, ``skipped_ticks``, ``lost_results``, ``quarantined``: the health of the run.

Exits non-zero, saying why, when the host restarted, a tick ran without traits, a trait's result
was lost or a trait was quarantined (all of them are benign), or the memory grew by more than
``--max-growth-pct`` after the warm-up: such a run did not measure a whole system.

``--hostile`` runs the same soak twice in one invocation, side by side: without and with three
hostile agents of the bench's own making, whose traits bypass the gatekeeper (as an escape
would): ``mallory`` (heavy-init traits beside a trait that hangs in C code once its carriers are
20 ticks old), ``trudy`` (a CPU hog within every documented per-call and per-tick limit, several
times the traits' budget a tick) and ``eve`` (a trait that writes garbage into its worker's reply
stream). It prints both arms, the ratio of their tick rates, when each guilty trait was
quarantined, the blame-free host restarts, and the ticks the benign agents' traits lost or sat
out; it fails unless every guilty trait was quarantined within ``--guilty-within-s``, no restart
was blame-free and no benign trait lost or sat out a tick.
"""

from __future__ import annotations

import argparse
import ast
import asyncio
import json
import logging
import math
import statistics
import sys
import time
from typing import Any

from genesis.config import Settings
from pipeline import registry

STATELESS = """import math

class BaseTrait:
    pass

class Stateless{k}(BaseTrait):
    async def execute(self, entity) -> None:
        entity.direction = entity.direction + math.sin(entity.age * 0.05 + {k}) * 0.2
        found = entity.nearest_resource()
        if found is not None and entity.energy < 60.0:
            entity.move(found[0], found[1])
"""

STATEFUL = """class BaseTrait:
    pass

class Stateful{k}(BaseTrait):
    def __init__(self):
        self.recent = []

    async def execute(self, entity) -> None:
        self.recent.append(entity.energy)
        if len(self.recent) > 8:
            self.recent.pop(0)
        mean = sum(self.recent) / len(self.recent)
        if entity.energy < mean - {k} * 0.01:
            entity.speed = 1.0
        else:
            entity.speed = 2.0
"""

HEAVY = """import math

class BaseTrait:
    pass

class Heavy{k}(BaseTrait):
    async def execute(self, entity) -> None:
        total = 0.0
        for i in range(60):
            total = total + math.sin(entity.x * 0.01 + i * {k})
        if total > 0:
            entity.state = "heavy"
        else:
            entity.state = "light"
"""

KINDS = {"stateless": STATELESS, "stateful": STATEFUL, "heavy": HEAVY}
TRAITS_PER_ENTITY = 5

# The hostile agents' traits (loaded as they are, without the gatekeeper: as an escape would be).
# name -> (agent, source, carriers, guilty)
HOSTILE_HEAVY_INIT = """class HeavyInit{k}:
    table = []

    def __init__(self):
        if not self.table:
            self.table.append(sum(range(1500000)))

    async def execute(self, entity) -> None:
        entity.direction = 0.25
"""
HOSTILE = {
    "mallory_gated_hang": (
        "mallory",
        "class GatedHang:\n    async def execute(self, entity) -> None:\n"
        "        if entity.age > 20:\n            entity.state = 'n%d' % sum(range(10 ** 12))\n",
        10,
        True,
    ),
    **{f"mallory_heavy_init_{k}": ("mallory", HOSTILE_HEAVY_INIT.replace("{k}", str(k)), 4, False) for k in range(6)},
    "trudy_hog": (
        "trudy",
        "class Hog:\n    async def execute(self, entity) -> None:\n"
        "        entity.state = 'h%d' % (sum(range(300000)) % 7)\n",
        15,
        True,
    ),
    "eve_garbler": (
        "eve",
        "import collections\n\nclass Garbler:\n    async def execute(self, entity) -> None:\n"
        "        frame = collections._sys._getframe()\n"
        "        while frame is not None and frame.f_code.co_name != 'worker_main':\n"
        "            frame = frame.f_back\n"
        "        frame.f_locals['out'].write(b'[' * 100000 + b'\\n')\n"
        "        frame.f_locals['out'].flush()\n",
        5,
        True,
    ),
}


def executing_class(source: str) -> str:
    """The class of ``source`` that defines ``async def execute`` (what the gatekeeper would name)."""
    return next(
        node.name
        for node in ast.parse(source).body
        if isinstance(node, ast.ClassDef)
        and any(isinstance(f, ast.AsyncFunctionDef) and f.name == "execute" for f in node.body)
    )


def hostile_entries() -> list[registry.RegistryEntry]:
    return [
        registry.RegistryEntry(
            trait_name=name,
            version=1,
            mutation_id=f"mut_bad{i:08d}",
            class_name=executing_class(source),
            code=source,
            code_hash=f"{i:064x}",
            agent_id=agent,
        )
        for i, (name, (agent, source, _carriers, _guilty)) in enumerate(HOSTILE.items())
    ]


def soak_traits(count: int, agents: int, kinds: tuple[str, ...] = tuple(KINDS)) -> list[registry.RegistryEntry]:
    """``count`` traits of ``kinds`` in turn, of ``agents`` agents, each passed through the
    gatekeeper (fails loudly if not)."""
    from bench.engine import gatekept_entry

    return [
        gatekept_entry(
            f"soak_{kinds[i % len(kinds)]}_{i:02d}",
            KINDS[kinds[i % len(kinds)]].replace("{k}", str(i)),
            f"mut_soak{i:08d}",
            f"soak-agent-{i % agents:02d}",
        )
        for i in range(count)
    ]


def workers_cpu_ms(host_stats: dict | None) -> float:
    """The CPU the host's worker processes have used, in ms (the kernel's count)."""
    return sum(w.get("cpu_ms", 0.0) for w in (host_stats or {}).get("workers", []))


def least_squares_slope(points: list[tuple[float, float]]) -> float:
    if len(points) < 2:
        return 0.0
    mx = statistics.fmean(x for x, _ in points)
    my = statistics.fmean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    return s[min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))]


async def run_soak(
    seconds: float,
    traits: int,
    agents: int,
    redis_url: str,
    warmup_s: float = 15.0,
    sample_s: float = 2.0,
    settings: Settings | None = None,
    kinds: tuple[str, ...] = tuple(KINDS),
    hostile: bool = False,
) -> dict[str, Any]:
    """The soak itself (``python -m bench.soak`` and the test suite's short version); with
    ``hostile``, the hostile agents' traits live beside the benign ones."""
    import redis.asyncio as aioredis

    from engine.core.world import World, WorldParams
    from engine.process.live_traits import HostTraitRunner
    from engine.process.loop import Engine

    base = settings or Settings()
    own = base.model_copy(update={"redis_url": redis_url})
    entries = soak_traits(traits, agents, kinds)
    bad = hostile_entries() if hostile else []
    redis = aioredis.from_url(redis_url)
    await redis.flushdb()
    for entry in entries + bad:
        await registry.put_entry(redis, entry)
    world = World(
        WorldParams(
            width=own.engine.world_width,
            height=own.engine.world_height,
            initial_population=own.engine.initial_population,
            min_population=own.engine.min_population,
            max_population=own.engine.max_population,
            initial_resources=own.engine.initial_resources,
            max_resources=own.engine.max_resources,
            resource_spawn_chance=own.engine.resource_spawn_chance,
        ),
        seed=own.engine.seed,
    )
    names = [e.trait_name for e in entries]
    world.set_available_traits(names + [e.trait_name for e in bad])
    ids = sorted(world.entities)
    at = 0
    for entry in bad:  # the hostile traits first, each on a few Molbots of its own
        for entity_id in ids[at : at + HOSTILE[entry.trait_name][2]]:
            world.give_trait(entity_id, entry.trait_name)
            world.entities[entity_id].age = 0  # born together: a gate on age opens for all at once
        at += HOSTILE[entry.trait_name][2]
    for i, entity_id in enumerate(ids):
        for j in range(TRAITS_PER_ENTITY):
            world.give_trait(entity_id, names[(i * TRAITS_PER_ENTITY + j) % len(names)])
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world)
    stop = asyncio.Event()
    ticks_each_second: list[int] = []
    memory: list[tuple[float, float]] = []  # (minutes since the warm-up, MB)
    try:
        await engine.start()
        if not set(names) <= set(runner.active_traits()):
            raise SystemExit(f"the soak's traits did not all load: {len(runner.active_traits())} of {len(names)}")
        quarantined_at: dict[str, float] = {}
        stats_at_start = (
            runner.stats.restarts,
            runner.stats.skipped_ticks,
            runner.stats.lost_results,
            runner.stats.throttled_results,
        )
        loop_task = asyncio.create_task(engine.run(stop))
        started = time.monotonic()
        last_tick, next_second, next_sample = world.tick, started + 1.0, started + warmup_s
        cpu_from: tuple[int, float] | None = None  # (tick, the workers' CPU ms) once warm
        while (now := time.monotonic()) < started + seconds:
            await asyncio.sleep(min(next_second, next_sample, now + 0.1) - now)
            now = time.monotonic()
            for name in runner.stats.quarantined:
                quarantined_at.setdefault(name, round(now - started, 2))
            if now >= next_second:
                if now - started > warmup_s:
                    ticks_each_second.append(world.tick - last_tick)
                    if cpu_from is None:
                        cpu_from = (world.tick, workers_cpu_ms(await runner.host_stats()))
                last_tick, next_second = world.tick, next_second + 1.0
            if now >= next_sample:
                used = await runner.host_memory_bytes()
                if used is not None:
                    memory.append(((now - started - warmup_s) / 60.0, used / 2**20))
                next_sample += sample_s
        stop.set()
        await loop_task
        host_stats = await runner.host_stats() or {}
        cpu_per_tick = (
            (workers_cpu_ms(host_stats) - cpu_from[1]) / max(1, world.tick - cpu_from[0]) if cpu_from else None
        )
        timings = runner.trait_timings()
        restarts = runner.stats.restarts - stats_at_start[0]
        skipped = runner.stats.skipped_ticks - stats_at_start[1]
        lost = runner.stats.lost_results - stats_at_start[2]
        throttled = runner.stats.throttled_results - stats_at_start[3]
    finally:
        stop.set()
        await engine.close()
        await redis.flushdb()
        await redis.aclose()
    benign = [state for name, state in timings.items() if name in names]
    start_mb = memory[0][1] if memory else None
    end_mb = memory[-1][1] if memory else None
    return {
        "seconds": round(seconds, 1),
        "traits": traits,
        "agents": agents,
        "tick_rate_target": own.engine.tick_rate,
        "fast_forward": own.engine.fast_forward,
        "ticks_per_s_p50": percentile(ticks_each_second, 50),
        "ticks_per_s_p1": percentile(ticks_each_second, 1),
        "ticks_per_s_mean": round(statistics.fmean(ticks_each_second), 2) if ticks_each_second else 0.0,
        "entities_at_end": world.population,
        "host_memory_mb_start": None if start_mb is None else round(start_mb, 1),
        "host_memory_mb_end": None if end_mb is None else round(end_mb, 1),
        "host_memory_growth_pct": None if not start_mb else round((end_mb - start_mb) / start_mb * 100, 2),
        "host_memory_slope_mb_per_min": round(least_squares_slope(memory), 3),
        "memory_samples": len(memory),
        "host_processes": len(host_stats.get("workers", [])),
        "workers_cpu_ms_per_tick": None if cpu_per_tick is None else round(cpu_per_tick, 3),
        "host_restarts": restarts,
        "skipped_ticks": skipped,
        "lost_results": lost,
        "throttled_results": throttled,
        "quarantined": list(runner.stats.quarantined),
        "tick_overruns": engine.tick_overruns,
        "benign_ticks_lost": sum(state["lost"] for state in benign),
        "benign_ticks_throttled": sum(state["throttled"] for state in benign),
        "benign_errors": sum(state["errors"] for state in benign),
        "quarantined_after_s": quarantined_at,
        "blame_free_restarts": runner.stats.restarts - sum(runner.stats.restarts_caused.values()),
        "restarts_caused": dict(runner.stats.restarts_caused),
    }


def health_problems(result: dict[str, Any], max_growth_pct: float) -> list[str]:
    problems = [
        f"{why} ({key}={result[key]})"
        for key, why in (
            ("host_restarts", "the trait host restarted"),
            ("skipped_ticks", "ticks ran without traits"),
            ("lost_results", "trait results were lost"),
            ("quarantined", "benign traits were quarantined"),
        )
        if result[key]
    ]
    if result["host_memory_growth_pct"] is None:
        problems.append("the host's memory could not be read")
    elif result["host_memory_growth_pct"] > max_growth_pct:
        problems.append(f"the host's memory grew by {result['host_memory_growth_pct']}% after the warm-up")
    return problems


def hostile_problems(result: dict[str, Any], guilty_within_s: float) -> list[str]:
    """What makes a hostile arm fail its targets (its memory is checked as any soak's)."""
    problems = []
    guilty = sorted(name for name, spec in HOSTILE.items() if spec[3])
    late = {name: result["quarantined_after_s"].get(name) for name in guilty}
    late = {name: after for name, after in late.items() if after is None or after > guilty_within_s}
    if late:
        problems.append(f"guilty traits not quarantined within {guilty_within_s} s: {late}")
    innocent = sorted(set(result["quarantined"]) - set(guilty))
    if innocent:
        problems.append(f"traits that did nothing wrong were quarantined: {innocent}")
    for key, why in (
        ("blame_free_restarts", "the trait host restarted with nobody to blame"),
        ("skipped_ticks", "ticks ran without traits"),
        ("benign_ticks_lost", "benign agents' traits lost ticks"),
        ("benign_ticks_throttled", "benign agents' traits were throttled"),
        ("benign_errors", "benign agents' traits failed"),
    ):
        if result[key]:
            problems.append(f"{why} ({key}={result[key]})")
    if result["host_memory_growth_pct"] is None:
        problems.append("the host's memory could not be read")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--traits", type=int, default=60)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--kinds", default=",".join(KINDS), help=f"kinds of benign trait, in turn (of {', '.join(KINDS)})")
    ap.add_argument(
        "--warmup-s",
        type=float,
        default=None,
        help="seconds excluded from rates and memory growth "
        "(default 30; with --hostile 3, so that the attacks are measured)",
    )
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between memory samples")
    ap.add_argument("--max-growth-pct", type=float, default=10.0)
    ap.add_argument("--redis-db", type=int, default=10, help="Redis database owned by the soak (flushed)")
    ap.add_argument("--fast-forward", action="store_true", help="run the engine unpaced (docs/world.md#fast-forward)")
    ap.add_argument("--hostile", action="store_true", help="two arms, without and with three hostile agents")
    ap.add_argument("--guilty-within-s", type=float, default=10.0, help="--hostile: the quarantine deadline")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    url = Settings().redis_url.rsplit("/", 1)[0] + f"/{args.redis_db}"
    settings = Settings().override(engine_fast_forward=True) if args.fast_forward else None
    kinds = tuple(k.strip() for k in args.kinds.split(",") if k.strip())
    if not kinds or any(k not in KINDS for k in kinds):
        ap.error(f"--kinds: choose from {', '.join(KINDS)}")
    warmup_s = args.warmup_s if args.warmup_s is not None else (3.0 if args.hostile else 30.0)

    def arm(hostile: bool) -> dict[str, Any]:
        return asyncio.run(
            run_soak(
                args.minutes * 60.0, args.traits, args.agents, url, warmup_s, args.sample_s, settings, kinds, hostile
            )
        )

    if not args.hostile:
        result = arm(False)
        print(json.dumps(result, indent=2))
        problems = health_problems(result, args.max_growth_pct)
    else:
        baseline, attacked = arm(False), arm(True)
        print(
            json.dumps(
                {
                    "baseline": baseline,
                    "hostile": attacked,
                    "ticks_per_s_p50_ratio": round(
                        attacked["ticks_per_s_p50"] / max(1, baseline["ticks_per_s_p50"]), 3
                    ),
                },
                indent=2,
            )
        )
        problems = [f"baseline: {p}" for p in health_problems(baseline, args.max_growth_pct)]
        problems += [f"hostile: {p}" for p in hostile_problems(attacked, args.guilty_within_s)]
    for problem in problems:
        print(f"bench.soak: not a valid run: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
