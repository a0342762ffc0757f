"""Soak: many live traits of many agents in the real engine loop, paced at its tick rate, for minutes.

    python -m bench.soak --minutes 10 --traits 60 --agents 20
    python -m bench.soak --minutes 10 --fast-forward   # the same, unpaced (GENESIS_ENGINE_FAST_FORWARD)

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
- ``host_restarts``, ``skipped_ticks``, ``lost_results``, ``quarantined``: the health of the run.

Exits non-zero, saying why, when the host restarted, a tick ran without traits, a trait's result
was lost or a trait was quarantined (all of them are benign), or the memory grew by more than
``--max-growth-pct`` after the warm-up: such a run did not measure a whole system.
"""

from __future__ import annotations

import argparse
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

KINDS = (STATELESS, STATEFUL, HEAVY)
TRAITS_PER_ENTITY = 5


def soak_traits(count: int, agents: int) -> list[registry.RegistryEntry]:
    """``count`` traits of the three kinds in turn, of ``agents`` agents, each passed through the
    gatekeeper (fails loudly if not)."""
    from bench.engine import gatekept_entry

    return [
        gatekept_entry(
            f"soak_{('stateless', 'stateful', 'heavy')[i % 3]}_{i:02d}",
            KINDS[i % 3].replace("{k}", str(i)),
            f"mut_soak{i:08d}",
            f"soak-agent-{i % agents:02d}",
        )
        for i in range(count)
    ]


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
) -> dict[str, Any]:
    """The soak itself (``python -m bench.soak`` and the test suite's short version)."""
    import redis.asyncio as aioredis

    from engine.live_traits import HostTraitRunner
    from engine.loop import Engine
    from engine.world import World, WorldParams

    base = settings or Settings()
    own = base.model_copy(update={"redis_url": redis_url})
    entries = soak_traits(traits, agents)
    redis = aioredis.from_url(redis_url)
    await redis.flushdb()
    for entry in entries:
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
    world.set_available_traits(names)
    for i, entity_id in enumerate(sorted(world.entities)):
        for j in range(TRAITS_PER_ENTITY):
            world.give_trait(entity_id, names[(i * TRAITS_PER_ENTITY + j) % len(names)])
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world)
    stop = asyncio.Event()
    ticks_each_second: list[int] = []
    memory: list[tuple[float, float]] = []  # (minutes since the warm-up, MB)
    try:
        await engine.start()
        if sorted(runner.active_traits()) != sorted(names):
            raise SystemExit(f"the soak's traits did not all load: {len(runner.active_traits())} of {len(names)}")
        stats_at_start = (runner.stats.restarts, runner.stats.skipped_ticks, runner.stats.lost_results)
        loop_task = asyncio.create_task(engine.run(stop))
        started = time.monotonic()
        last_tick, next_second, next_sample = world.tick, started + 1.0, started + warmup_s
        while (now := time.monotonic()) < started + seconds:
            await asyncio.sleep(min(next_second, next_sample) - now)
            now = time.monotonic()
            if now >= next_second:
                if now - started > warmup_s:
                    ticks_each_second.append(world.tick - last_tick)
                last_tick, next_second = world.tick, next_second + 1.0
            if now >= next_sample:
                used = await runner.host_memory_bytes()
                if used is not None:
                    memory.append(((now - started - warmup_s) / 60.0, used / 2**20))
                next_sample += sample_s
        stop.set()
        await loop_task
        host_stats = await runner.host_stats() or {}
        restarts = runner.stats.restarts - stats_at_start[0]
        skipped = runner.stats.skipped_ticks - stats_at_start[1]
        lost = runner.stats.lost_results - stats_at_start[2]
    finally:
        stop.set()
        await engine.close()
        await redis.flushdb()
        await redis.aclose()
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
        "host_restarts": restarts,
        "skipped_ticks": skipped,
        "lost_results": lost,
        "quarantined": list(runner.stats.quarantined),
        "tick_overruns": engine.tick_overruns,
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--traits", type=int, default=60)
    ap.add_argument("--agents", type=int, default=20)
    ap.add_argument("--warmup-s", type=float, default=30.0, help="seconds excluded from rates and memory growth")
    ap.add_argument("--sample-s", type=float, default=5.0, help="seconds between memory samples")
    ap.add_argument("--max-growth-pct", type=float, default=10.0)
    ap.add_argument("--redis-db", type=int, default=10, help="Redis database owned by the soak (flushed)")
    ap.add_argument("--fast-forward", action="store_true", help="run the engine unpaced (docs/world.md#fast-forward)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    url = Settings().redis_url.rsplit("/", 1)[0] + f"/{args.redis_db}"
    settings = Settings().override(engine_fast_forward=True) if args.fast_forward else None
    result = asyncio.run(
        run_soak(args.minutes * 60.0, args.traits, args.agents, url, args.warmup_s, args.sample_s, settings)
    )
    print(json.dumps(result, indent=2))
    problems = health_problems(result, args.max_growth_pct)
    for problem in problems:
        print(f"bench.soak: not a valid run: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
