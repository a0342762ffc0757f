"""Engine speed: N entities x 3 live traits in a real trait-host container, vs the same model in Mesa.

    python -m bench.engine --entities 500 --traits 3 --ticks 300
    python -m bench.engine --entities 500,5000 --ticks 300 --compare-mesa

Prints one JSON object (or, for several sizes, an object keyed by size) with:

- ``ticks_per_s``, ``ms_per_tick_p50``, ``ms_per_tick_p99``: unpaced ``Engine.tick_once`` (views ->
  trait host container over its channel (a private Unix socket, JSON lines with binary
  attachments) -> intents -> ``World.step``), after ``--warmup`` ticks (``warmup_ticks``; default
  500). The default measures the steady state the live engine runs in for hours: the trait host
  runs on PyPy, whose JIT is still compiling the traits' and the host's loops in the first few
  hundred ticks (at 500 entities the host needs ~4 ms a tick after 20 ticks, ~2.5 ms after 500);
  ``--warmup 20`` shows the engine's first seconds.
- ``entities``: mean population during the measured ticks; ``carriers_at_end``: entities with >= 1
  trait; ``traits``: live traits (every entity carries all of them).
- ``snapshot_ms``: median wall time of ``engine.process.telemetry.build_snapshot`` (with the state hash)
  on the final world, measured apart from the ticks.
- ``memory_per_1000_entities_kb``: tracemalloc (Python heap, engine side) of a world with N entities
  minus the same world with none, per 1,000 entities (includes the spatial grid entries).
- ``engine_cpu_ms_per_tick`` (this process, all threads) and ``host_cpu_ms_per_tick`` (the
  trait-host container, from Docker's stats) during the measured ticks, and
  ``cpu_bound_ticks_per_s`` = 1000 / their sum: the rate if neither side ever waited for a CPU
  (the two run mostly one after the other each tick: only ``World.prepare_step`` overlaps the
  host). On a machine shared with other work the wall-clock
  ``ticks_per_s`` falls below it; ``loadavg_1m`` (before, after) says how busy the machine was.
- ``host_restarts`` / ``host_deadline_misses`` / ``trait_errors``: must be 0 for a valid run.
- with ``--compare-mesa``: ``mesa_ticks_per_s`` (and its percentiles) of the same model written
  the Mesa 3.3 way — agents with the three behaviours as plain methods called in process,
  ``mesa.space.ContinuousSpace`` neighbour search (brute force over all agents, as Mesa does) —
  run in the same process right after, and ``ratio_vs_mesa``. Mesa is run for at most
  ``--mesa-seconds`` of wall time (at least 3 ticks), since it is far slower at large N.

The live traits are registered in a Redis database of the bench's own (``--redis-db``, flushed
before and after) and loaded by ``HostTraitRunner.refresh`` exactly as the engine does.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import math
import os
import statistics
import sys
import time
import tracemalloc
from typing import Any

import gatekeeper
from genesis.config import Settings
from pipeline import registry

# -- the three traits (the allowed style: BaseTrait stub + async execute + Entity API) -------------

WANDER = """import math

class BaseTrait:
    pass

class WanderTrait(BaseTrait):
    async def execute(self, entity) -> None:
        turn = math.sin(entity.age * 0.07 + entity.id) * 0.25
        if entity.neighbors > 4:
            turn = turn + 0.8
        entity.direction = entity.direction + turn
"""

FORAGE = """class BaseTrait:
    pass

class ForageTrait(BaseTrait):
    async def execute(self, entity) -> None:
        found = entity.nearest_resource()
        if found is None:
            return
        if entity.energy < entity.max_energy * 0.9:
            entity.move(found[0], found[1])
            if found[2] < entity.speed + 6.0:
                entity.eat()
"""

ENERGY_SAVER = """class BaseTrait:
    pass

class EnergySaverTrait(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < entity.max_energy * 0.3:
            if entity.state != "saving":
                entity.energy_consumption_rate = 0.6
                entity.state = "saving"
        elif entity.state == "saving" and entity.energy > entity.max_energy * 0.6:
            entity.energy_consumption_rate = 1.0
            entity.state = "active"
"""

TRAITS = {"wander": WANDER, "forage": FORAGE, "energy_saver": ENERGY_SAVER}


def validated_traits(count: int, agents: int | None = None) -> list[registry.RegistryEntry]:
    """The first ``count`` traits, each passed through the gatekeeper (fails loudly if not), of
    ``agents`` agents (default: each trait its own agent, so each runs in a process of its own)."""
    agents = agents or count
    if not 1 <= count <= len(TRAITS):
        raise SystemExit(f"--traits must be 1..{len(TRAITS)}")
    return [
        gatekept_entry(name, code, f"mut_bench{i:02d}", f"agent-{i % agents}")
        for i, (name, code) in enumerate(list(TRAITS.items())[:count])
    ]


def gatekept_entry(name: str, code: str, mutation_id: str, agent_id: str) -> registry.RegistryEntry:
    """A live registry entry for a benchmark's trait, once the gatekeeper has passed it (a trait
    it refuses stops the benchmark)."""
    gate = gatekeeper.validate(name, code)
    if not gate.ok:
        raise SystemExit(f"bench trait {name} is rejected by the gatekeeper: {gate.failure_code} {gate.validation_log}")
    return registry.RegistryEntry(
        trait_name=name,
        version=1,
        mutation_id=mutation_id,
        class_name=gate.class_name,
        code=code,
        code_hash=gate.code_hash,
        agent_id=agent_id,
    )


# -- the world --------------------------------------------------------------------------------------


def world_params(n: int):
    """The default density (200 entities on 800 x 600), scaled to N; population pinned at N
    (max = min = N: no births, deaths refilled), resources plentiful, slow metabolism so that
    nobody starves within a few thousand ticks."""
    from engine.core.world import WorldParams

    scale = math.sqrt(max(n, 1) / 200.0)
    return WorldParams(
        width=round(800.0 * scale, 1),
        height=round(600.0 * scale, 1),
        initial_population=n,
        min_population=n,
        max_population=n,
        initial_resources=n,
        max_resources=n,
        resource_spawn_chance=1.0,
        base_metabolism=0.02,
        move_cost=0.01,
        max_age=100_000,
        trait_gain_chance=1.0,
    )


def build_world(n: int, trait_names: list[str], seed: int):
    from engine.core.world import World

    world = World(world_params(n), seed=seed)
    world.set_available_traits(trait_names)
    for name in trait_names:
        world.give_trait_to_all(name)
    return world


def percentile(values: list[float], q: float) -> float:
    s = sorted(values)
    if not s:
        return 0.0
    k = min(len(s) - 1, max(0, math.ceil(q / 100.0 * len(s)) - 1))
    return s[k]


def world_memory_kb_per_1000(n: int, trait_names: list[str], seed: int) -> float:
    from dataclasses import replace

    from engine.core.world import World

    gc.collect()
    tracemalloc.start()
    try:
        base0 = tracemalloc.get_traced_memory()[0]
        empty = World(replace(world_params(n), initial_population=0, min_population=0), seed=seed)
        base1 = tracemalloc.get_traced_memory()[0]
        full = build_world(n, trait_names, seed)
        full1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    per_entity = ((full1 - base1) - (base1 - base0)) / n
    del empty, full
    return round(per_entity * 1000 / 1024, 1)


# -- Genesis: the real engine path -------------------------------------------------------------------


async def run_genesis(
    n: int, entries: list[registry.RegistryEntry], ticks: int, warmup: int, seed: int, redis_db: int
) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from engine.process.live_traits import HostTraitRunner
    from engine.process.loop import Engine
    from engine.process.telemetry import PeriodCounters, build_snapshot

    base = Settings()
    url = base.redis_url.rsplit("/", 1)[0] + f"/{redis_db}"
    settings = Settings().override(redis_url=url, engine_snapshot_interval=10**9, engine_trait_deadline_ms=5000.0)
    redis = aioredis.from_url(url)
    await redis.flushdb()
    for entry in entries:
        await registry.put_entry(redis, entry)
    runner = HostTraitRunner(settings, redis)
    world = build_world(n, [e.trait_name for e in entries], seed)
    engine = Engine(settings, runner, world=world)
    try:
        t0 = time.perf_counter()
        await engine.start()  # refresh(): starts the container and loads the traits
        startup_s = time.perf_counter() - t0
        if sorted(runner.active_traits()) != sorted(e.trait_name for e in entries):
            raise SystemExit(f"traits did not load into the host: {runner.active_traits()}")
        for _ in range(warmup):
            await engine.tick_once()
        gc.collect()
        clock = time.perf_counter
        times: list[float] = []
        pops: list[int] = []
        carriers: list[int] = []
        load_before = os.getloadavg()[0]
        host_cpu0 = await asyncio.to_thread(host_cpu_ns, runner)
        cpu0 = time.process_time()
        started = clock()
        for _ in range(ticks):
            t = clock()
            await engine.tick_once()
            times.append(clock() - t)
            pops.append(world.population)
        total = clock() - started
        engine_cpu = time.process_time() - cpu0
        host_cpu1 = await asyncio.to_thread(host_cpu_ns, runner)
        host_stats = await runner.host_stats()
        host_cpu_ms = (host_cpu1 - host_cpu0) / 1e6 / ticks if host_cpu0 is not None and host_cpu1 is not None else None
        carriers.append(sum(1 for e in world.entities.values() if e.traits))
        calls = sum(s["calls"] for s in runner.trait_timings().values())
        trait_us = sum(s["mean_us"] * s["calls"] for s in runner.trait_timings().values())
        snap_times = []
        for _ in range(7):
            t = clock()
            build_snapshot(
                world,
                PeriodCounters(world.stats()),
                timestamp=time.time(),
                tick_overruns=0,
                ticks_per_second=0.0,
                run_id="bench",
            )
            snap_times.append(clock() - t)
        stats = world.stats()
        return {
            "ticks_per_s": round(ticks / total, 1),
            "ms_per_tick_p50": round(percentile(times, 50) * 1000, 3),
            "ms_per_tick_p99": round(percentile(times, 99) * 1000, 3),
            "ms_per_tick_mean": round(total / ticks * 1000, 3),
            "entities": round(statistics.fmean(pops), 1),
            "carriers_at_end": carriers[-1],
            "traits": len(entries),
            "trait_calls_per_tick": round(calls / (ticks + warmup), 1),
            "trait_exec_ms_per_tick": round(trait_us / (ticks + warmup) / 1000, 3),
            "engine_cpu_ms_per_tick": round(engine_cpu / ticks * 1000, 3),
            "host_cpu_ms_per_tick": None if host_cpu_ms is None else round(host_cpu_ms, 3),
            "cpu_bound_ticks_per_s": (
                None if host_cpu_ms is None else round(1000.0 / (engine_cpu / ticks * 1000 + host_cpu_ms), 1)
            ),
            "loadavg_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)],
            "snapshot_ms": round(statistics.median(snap_times) * 1000, 3),
            "host_startup_s": round(startup_s, 2),
            "host_restarts": runner.stats.restarts,
            "host_deadline_misses": runner.stats.deadline_misses,
            "skipped_ticks": runner.stats.skipped_ticks,
            "lost_results": runner.stats.lost_results,
            "quarantined": len(runner.stats.quarantined),
            "host_processes": len((host_stats or {}).get("workers", [])),
            "trait_errors": engine.trait_errors
            + sum(s["errors"] + s["timeouts"] for s in runner.trait_timings().values()),
            "intents_rejected": sum(stats["rejected_intents"].values()),
            "deaths": sum(stats["deaths"].values()),
            "respawns": stats["respawns"],
        }
    finally:
        await engine.close()
        await redis.flushdb()
        await redis.aclose()


def host_cpu_ns(runner) -> int | None:
    """CPU time the trait-host container has used so far (Docker's stats), or None."""
    host = getattr(runner, "_host", None)
    if host is None:
        return None
    try:
        stats = runner._client.containers.get(host.id).stats(stream=False)
        return int(stats["cpu_stats"]["cpu_usage"]["total_usage"])
    except Exception:
        return None


# -- the same model in Mesa 3.3 ----------------------------------------------------------------------


def _mesa_classes():
    import mesa
    from mesa.space import ContinuousSpace

    from genesis.entity_api import MAX_CONSUMPTION_RATE, MAX_SPEED, MIN_CONSUMPTION_RATE

    TWO_PI = 2.0 * math.pi

    class Resource(mesa.Agent):
        def __init__(self, model, energy: float) -> None:
            super().__init__(model)
            self.energy = energy

    class Bot(mesa.Agent):
        """One Molbot: the three behaviours are plain methods, called in process each step."""

        def __init__(self, model) -> None:
            super().__init__(model)
            p = model.p
            rng = model.random
            self.energy = p.initial_energy
            self.max_energy = p.max_energy
            self.speed = p.initial_speed_min + rng.random() * (p.initial_speed_max - p.initial_speed_min)
            self.direction = rng.random() * TWO_PI - math.pi
            self.age = 0
            self.max_age = p.max_age
            self.state = ""
            self.energy_consumption_rate = 1.0
            self.neighbors = 0
            self.nearest = None  # (dx, dy, distance) or None
            self._move = None
            self._eat = False

        # the Entity API's methods
        def move(self, dx: float, dy: float) -> None:
            self._move = (dx, dy)

        def eat(self) -> None:
            self._eat = True

        def nearest_resource(self):
            return self.nearest

        # the three traits, the same logic as the trait sources
        def wander(self) -> None:
            turn = math.sin(self.age * 0.07 + self.unique_id) * 0.25
            if self.neighbors > 4:
                turn = turn + 0.8
            self.direction = math.remainder(self.direction + turn, TWO_PI)

        def forage(self) -> None:
            found = self.nearest_resource()
            if found is None:
                return
            if self.energy < self.max_energy * 0.9:
                self.move(found[0], found[1])
                if found[2] < self.speed + 6.0:
                    self.eat()

        def energy_saver(self) -> None:
            if self.energy < self.max_energy * 0.3:
                if self.state != "saving":
                    self.energy_consumption_rate = min(max(0.6, MIN_CONSUMPTION_RATE), MAX_CONSUMPTION_RATE)
                    self.state = "saving"
            elif self.state == "saving" and self.energy > self.max_energy * 0.6:
                self.energy_consumption_rate = 1.0
                self.state = "active"

        def step(self) -> None:
            model = self.model
            p = model.p
            x, y = self.pos
            # sense: neighbours and the nearest resource, the Mesa way (space queries)
            self.neighbors = len(model.space.get_neighbors(self.pos, p.sense_radius, include_center=False))
            best = None
            best_d2 = p.sense_radius * p.sense_radius
            for r in model.rspace.get_neighbors(self.pos, p.sense_radius):
                dx = r.pos[0] - x
                dy = r.pos[1] - y
                d2 = dx * dx + dy * dy
                if d2 <= best_d2:
                    best_d2, best = d2, (dx, dy)
            self.nearest = None if best is None else (best[0], best[1], math.sqrt(best_d2))
            self._move = None
            self._eat = False
            for behaviour in model.behaviours:
                behaviour(self)
            # physics: the same rules as World.step
            rate = self.energy_consumption_rate
            sp = min(self.speed, MAX_SPEED * rate if rate < 1.0 else MAX_SPEED)
            if self._move is None:
                d = self.direction + (model.random.random() * 2.0 - 1.0) * p.wander_turn
                nx = x + math.cos(d) * sp
                ny = y + math.sin(d) * sp
                if nx < 0.0 or nx > model.xmax:
                    d = math.pi - d
                if ny < 0.0 or ny > model.ymax:
                    d = -d
                self.direction = math.remainder(d, TWO_PI)
            else:
                dx, dy = self._move
                h = math.hypot(dx, dy)
                nx, ny = (x + dx / h * sp, y + dy / h * sp) if h > 0 else (x, y)
            nx = min(max(nx, 0.0), model.xmax)
            ny = min(max(ny, 0.0), model.ymax)
            moved = math.hypot(nx - x, ny - y)
            model.space.move_agent(self, (nx, ny))
            energy = self.energy
            if self._eat or energy < p.hunger_fraction * self.max_energy:
                near = model.rspace.get_neighbors((nx, ny), p.eat_radius)
                if near:
                    food = min(near, key=lambda r: ((r.pos[0] - nx) ** 2 + (r.pos[1] - ny) ** 2, r.unique_id))
                    energy = min(energy + food.energy, self.max_energy)
                    model.rspace.remove_agent(food)
                    food.remove()
            self.energy = energy - p.base_metabolism * rate - p.move_cost * moved
            self.age += 1

    class World(mesa.Model):
        def __init__(self, n: int, params, seed: int, behaviours) -> None:
            super().__init__(seed=seed)
            self.p = params
            self.n = n
            self.behaviours = behaviours
            self.xmax = math.nextafter(params.width, 0.0)
            self.ymax = math.nextafter(params.height, 0.0)
            self.space = ContinuousSpace(params.width, params.height, torus=False)
            self.rspace = ContinuousSpace(params.width, params.height, torus=False)
            for _ in range(n):
                self.spawn_bot()
            for _ in range(params.initial_resources):
                self.spawn_resource()

        def spawn_bot(self) -> None:
            bot = Bot(self)
            self.space.place_agent(bot, (self.random.random() * self.xmax, self.random.random() * self.ymax))

        def spawn_resource(self) -> None:
            r = Resource(self, self.p.resource_energy)
            self.rspace.place_agent(r, (self.random.random() * self.xmax, self.random.random() * self.ymax))

        def step(self) -> None:
            p = self.p
            bots = self.agents_by_type[Bot]
            bots.shuffle_do("step")
            # collisions: every pair closer than collision_radius, each pair once
            for bot in bots:
                for other in self.space.get_neighbors(bot.pos, p.collision_radius, include_center=False):
                    if other.unique_id > bot.unique_id:
                        bot.energy -= p.collision_damage
                        other.energy -= p.collision_damage
            # deaths, then the population floor
            dead = [b for b in bots if b.energy <= 0.0 or b.age >= b.max_age]
            for b in dead:
                self.space.remove_agent(b)
                b.remove()
            while len(self.agents_by_type[Bot]) < p.min_population:
                self.spawn_bot()
            if len(self.agents_by_type[Resource]) < p.max_resources and self.random.random() < p.resource_spawn_chance:
                self.spawn_resource()

    return World, Bot


def run_mesa(n: int, trait_count: int, ticks: int, warmup: int, seed: int, max_seconds: float) -> dict[str, Any]:
    World, Bot = _mesa_classes()
    behaviours = [Bot.wander, Bot.forage, Bot.energy_saver][:trait_count]
    model = World(n, world_params(n), seed, behaviours)
    for _ in range(min(warmup, 3)):
        model.step()
    clock = time.perf_counter
    times: list[float] = []
    pops: list[int] = []
    started = clock()
    while len(times) < ticks and (len(times) < 3 or clock() - started < max_seconds):
        t = clock()
        model.step()
        times.append(clock() - t)
        pops.append(len(model.agents_by_type[Bot]))
    total = clock() - started
    return {
        "mesa_version": __import__("mesa").__version__,
        "mesa_ticks_per_s": round(len(times) / total, 2),
        "mesa_ms_per_tick_p50": round(percentile(times, 50) * 1000, 2),
        "mesa_ms_per_tick_p99": round(percentile(times, 99) * 1000, 2),
        "mesa_ticks_measured": len(times),
        "mesa_entities": round(statistics.fmean(pops), 1),
    }


def mesa_memory_kb_per_1000(n: int, seed: int) -> float:
    World, _ = _mesa_classes()
    from dataclasses import replace

    params = world_params(n)
    gc.collect()
    tracemalloc.start()
    try:
        b0 = tracemalloc.get_traced_memory()[0]
        empty = World(0, replace(params, min_population=0), seed, [])
        b1 = tracemalloc.get_traced_memory()[0]
        full = World(n, params, seed, [])
        full.space.get_neighbors((0.0, 0.0), 1.0)  # build the space's point cache, as a run does
        f1 = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del empty, full
    return round(((f1 - b1) - (b1 - b0)) / n * 1000 / 1024, 1)


# -- main ---------------------------------------------------------------------------------------------


def bench_one(n: int, args, entries) -> dict[str, Any]:
    names = [e.trait_name for e in entries]
    out = asyncio.run(run_genesis(n, entries, args.ticks, args.warmup, args.seed, args.redis_db))
    out["memory_per_1000_entities_kb"] = world_memory_kb_per_1000(n, names, args.seed)
    out["memory_method"] = "tracemalloc: engine-side Python heap of the world, N entities minus 0, per 1000"
    if args.compare_mesa:
        mesa_out = run_mesa(n, len(entries), args.ticks, args.warmup, args.seed, args.mesa_seconds)
        out.update(mesa_out)
        out["mesa_memory_per_1000_entities_kb"] = mesa_memory_kb_per_1000(n, args.seed)
        out["ratio_vs_mesa"] = round(out["ticks_per_s"] / mesa_out["mesa_ticks_per_s"], 2)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entities", default="500", help="N, or several: 500,5000")
    ap.add_argument("--traits", type=int, default=3, help="how many of wander, forage, energy_saver (1-3)")
    ap.add_argument("--ticks", type=int, default=300)
    ap.add_argument("--warmup", type=int, default=100, help="ticks run before the measured ones")
    ap.add_argument(
        "--agents",
        type=int,
        default=0,
        help="agents the traits belong to (default: one per trait, each in a process of its own)",
    )
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--compare-mesa", action="store_true")
    ap.add_argument("--mesa-seconds", type=float, default=30.0, help="wall-time cap of the Mesa run per size")
    ap.add_argument(
        "--redis-db",
        type=int,
        default=10,
        help="Redis database owned by the bench (flushed; not one the test suite uses: 15)",
    )
    args = ap.parse_args(argv)
    sizes = [int(s) for s in args.entities.split(",") if s.strip()]
    entries = validated_traits(args.traits, args.agents or None)
    results = {}
    for n in sizes:
        results[n] = bench_one(n, args, entries)
        results[n]["entities_requested"] = n
        results[n]["ticks_measured"] = args.ticks
        results[n]["warmup_ticks"] = args.warmup
        results[n]["agents"] = len({e.agent_id for e in entries})
        print(f"bench.engine: {n} entities done", file=sys.stderr)
    out: Any = results[sizes[0]] if len(sizes) == 1 else {str(n): r for n, r in results.items()}
    print(json.dumps(out, indent=2))
    unhealthy = {n: problems for n, r in results.items() if (problems := health_problems(r))}
    for n, problems in unhealthy.items():
        print(f"bench.engine: the {n}-entity figures are not valid: {'; '.join(problems)}", file=sys.stderr)
    return 1 if unhealthy else 0


def health_problems(result: dict[str, Any]) -> list[str]:
    """Why a run measured something other than the whole system (empty: it did not)."""
    checks = {
        "host_restarts": "the trait host restarted",
        "host_deadline_misses": "the trait host missed its deadline",
        "skipped_ticks": "ticks ran without traits (host down)",
        "lost_results": "trait results were lost (a process killed or the machine too busy)",
        "quarantined": "traits were quarantined",
        "trait_errors": "traits raised or overran",
    }
    return [f"{why} ({key}={result.get(key)})" for key, why in checks.items() if result.get(key)]


if __name__ == "__main__":
    sys.exit(main())
