"""Fast-forward (GENESIS_ENGINE_FAST_FORWARD): the unpaced loop computes what the paced loop
computes, tick for tick, never sleeps and has no budget.

No service: the engines' telemetry goes to a Redis port nobody listens on (the sink writes off the
tick path and counts its failures), and the trait runs in a trusted in-process runner. The
real trait host is exercised in tests/stack/test_fast_forward.py."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cli.processes import free_port
from engine.core.model import world_params
from engine.core.world import World, WorldParams
from engine.process.loop import Engine
from engine.process.telemetry import TelemetrySink
from genesis.config import Settings

TICKS = 240
TRAIT_ARRIVES, TRAIT_LEAVES = 20, 200  # the same trait-set changes at the same ticks in every run


class ScheduledForager:
    """A trusted, in-process trait runner: 'forager' (heads for the nearest food and eats) is live
    from tick TRAIT_ARRIVES to tick TRAIT_LEAVES, read off the world's own tick (every Molbot of
    the world carries it from the start; its carriers lose it when it leaves)."""

    def __init__(self) -> None:
        self.world: World | None = None
        self.ran: list[int] = []

    def active_traits(self) -> list[str]:
        assert self.world is not None
        return ["forager"] if TRAIT_ARRIVES <= self.world.tick < TRAIT_LEAVES else []

    async def run_tick(self, tick: int, batches: dict[str, list[dict]]) -> dict[int, list[list[Any]]]:
        self.ran.append(tick)
        out: dict[int, list[list[Any]]] = {}
        for view in batches.get("forager", []):
            near = view["nearest_resource"]
            if near is not None:
                out[view["id"]] = [["move_towards", view["x"] + near[0], view["y"] + near[1]], ["eat"]]
        return out

    async def refresh(self) -> None:
        return None

    async def close(self) -> None:
        return None


class Clock:
    """A clock the test moves: each world step costs ``step_s`` of it, a sleep its delay."""

    def __init__(self, step_s: float, costly: dict[int, float] | None = None) -> None:
        self.t = 1000.0
        self.step_s = step_s
        self.costly = costly or {}

    def __call__(self) -> float:
        return self.t


class TimedWorld(World):
    def __init__(self, clock: Clock, **kw: Any) -> None:
        super().__init__(**kw)
        self._clock = clock

    def step(self, intents=None, lazy_write_back=False, forced=None):
        self._clock.t += self._clock.costly.get(self.tick, self._clock.step_s)
        return super().step(intents, lazy_write_back, forced)


def world_settings(**changes: Any) -> Settings:
    return Settings().override(
        engine_seed=11,
        engine_initial_population=60,
        engine_min_population=20,
        engine_trait_gain_chance=1.0,
        engine_metrics_port=0,
        **changes,
    )


def unreachable_sink() -> TelemetrySink:
    return TelemetrySink(f"redis://127.0.0.1:{free_port()}/0")  # nothing listens: writes fail, counted


async def run_world(fast_forward: bool) -> dict[str, Any]:
    """TICKS ticks of the same seeded world in real time, paced at 200 ticks/s or fast-forward;
    every tick's state hash (a snapshot every tick), the sleeps the loop asked for, its counters."""
    settings = world_settings(engine_tick_rate=200.0, engine_snapshot_interval=1, engine_fast_forward=fast_forward)
    runner = ScheduledForager()
    world = World(world_params(settings.engine), seed=settings.engine.seed)
    world.set_available_traits(["forager"])
    world.give_trait_to_all("forager")
    engine = Engine(settings, runner, world=world, sink=unreachable_sink())
    runner.world = world
    snapshots: list[dict] = []
    sleeps: list[float] = []

    async def keep(snap: dict) -> None:
        snapshots.append(snap)

    async def sleep(delay: float) -> None:
        sleeps.append(delay)
        await asyncio.sleep(delay)

    engine.snapshot_hooks.append(keep)
    engine.sleep = sleep
    try:
        await engine.run(max_ticks=TICKS)
    finally:
        await engine.close()
    return {
        "hashes": [(snap["tick"], snap["state_hash"]) for snap in snapshots],
        "carried": [snap["trait_usage"].get("forager", 0) for snap in snapshots],
        "ran": runner.ran,
        "sleeps": sleeps,
        "overruns": engine.tick_overruns,
        "final": engine.world.state_hash(),
    }


async def test_fast_forward_has_a_paced_runs_state_at_every_tick():
    paced = await run_world(fast_forward=False)
    fast = await run_world(fast_forward=True)
    assert [tick for tick, _ in paced["hashes"]] == list(range(1, TICKS + 1))
    assert fast["hashes"] == paced["hashes"]
    assert fast["final"] == paced["final"]
    # the trait ran on exactly the same ticks, while it was live, and left with its carriers
    assert paced["ran"] == list(range(TRAIT_ARRIVES, TRAIT_LEAVES)) and fast["ran"] == paced["ran"]
    assert paced["carried"][TRAIT_LEAVES - 2] > 0 and paced["carried"][TRAIT_LEAVES] == 0
    # the paced loop slept between ticks; fast-forward only ever yielded
    assert any(delay > 0 for delay in paced["sleeps"])
    assert len(fast["sleeps"]) == TICKS and set(fast["sleeps"]) == {0}
    assert fast["overruns"] == 0


async def run_on_clock(fast_forward: bool, ticks: int) -> Engine:
    """``ticks`` ticks of 1 ms each on a clock the test moves, at 60 ticks/s paced; tick 5 takes
    0.5 s (paced: an overrun and a reset schedule)."""
    clock = Clock(0.001, {5: 0.5})
    settings = world_settings(engine_tick_rate=60.0, engine_snapshot_interval=100, engine_fast_forward=fast_forward)
    world = TimedWorld(clock, params=WorldParams(initial_population=60), seed=11)

    async def sleep(delay: float) -> None:
        clock.t += delay
        await asyncio.sleep(0)

    engine = Engine(settings, world=world, sink=unreachable_sink(), clock=clock, sleep=sleep)
    try:
        await engine.run(max_ticks=ticks)
        engine.status()  # opens a fresh measuring window
        await engine.run(max_ticks=ticks)
    finally:
        await engine.close()
    return engine


async def test_fast_forward_has_no_budget_and_reports_its_rate():
    paced = await run_on_clock(fast_forward=False, ticks=120)
    fast = await run_on_clock(fast_forward=True, ticks=120)
    assert paced.tick_overruns == 1 and paced.lag_resets == 1
    assert fast.tick_overruns == 0 and fast.lag_resets == 0
    paced_status, fast_status = paced.status(), fast.status()
    assert paced_status["mode"] == "paced" and fast_status["mode"] == "fast_forward"
    # the last window: ticks of 1 ms each, paced at 60 ticks/s or back to back
    assert paced_status["ticks_per_second"] == pytest.approx(60.0, rel=0.05)
    assert fast_status["ticks_per_second"] == pytest.approx(1000.0, rel=0.05)
    assert paced.world.state_hash() == fast.world.state_hash()


async def test_fast_forward_does_not_run_ahead_of_its_snapshot_hooks():
    """The hooks signal the workflows that observe the world: a fast world waits for them rather
    than piling up their signals (at most two snapshots' worth in flight)."""
    settings = world_settings(engine_snapshot_interval=1, engine_fast_forward=True)
    engine = Engine(settings, sink=unreachable_sink())
    seen: list[int] = []
    running = most = 0

    async def slow_observer(snap: dict) -> None:
        nonlocal running, most
        running += 1
        most = max(most, running)
        await asyncio.sleep(0.005)  # far longer than a tick of this world
        seen.append(snap["tick"])
        running -= 1

    engine.snapshot_hooks.append(slow_observer)
    try:
        await engine.run(max_ticks=40)
    finally:
        await engine.close()
    assert sorted(seen) == list(range(1, 41))
    assert most <= 2
