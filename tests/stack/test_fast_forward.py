"""Fast-forward (GENESIS_ENGINE_FAST_FORWARD) with the real parts: live traits in a real trait-host
container, telemetry in Redis (GENESIS_TEST_ENGINE_REDIS_URL, flushed), and a `python -m engine`
process started by the harness.

Nothing here asserts how fast the machine is: fast-forward is shown faster than the paced rate
by a wide margin only (a tick rate the paced engine could not fall below), and the viewer frames'
wall-clock limit runs on a clock the test moves."""

from __future__ import annotations

import asyncio
import json
import os
import time

import httpx
import pytest
import redis.asyncio as aioredis

from bench.engine import validated_traits
from cli.processes import api_process, engine_process, free_port, wait_for_api
from engine.core.world import World, WorldParams
from engine.process.live_traits import HostTraitRunner
from engine.process.loop import Engine
from genesis import redis_keys as keys
from genesis.redis_keys import Channels
from pipeline import registry
from tests.services import fresh_journal

ENGINE_REDIS_URL = os.environ.get("GENESIS_TEST_ENGINE_REDIS_URL", "redis://127.0.0.1:6379/13")
TICKS = 150


@pytest.fixture
async def engine_settings(settings):
    r = aioredis.from_url(ENGINE_REDIS_URL)
    await r.flushdb()
    await r.aclose()
    return settings.override(redis_url=ENGINE_REDIS_URL, engine_snapshot_interval=300)


@pytest.fixture
async def live_traits(engine_settings):
    """Two gatekept traits (bench/engine.py's wander and forage, two agents) in the registry."""
    redis = aioredis.from_url(ENGINE_REDIS_URL)
    entries = validated_traits(2)
    for entry in entries:
        await registry.put_entry(redis, entry)
    yield [entry.trait_name for entry in entries]
    await redis.flushdb()
    await redis.aclose()


def carrying_world(traits: list[str]) -> World:
    world = World(WorldParams(initial_population=40), seed=23)
    world.set_available_traits(traits)
    world.give_trait_to_all(traits[0])
    for entity_id in sorted(world.entities)[::2]:
        world.give_trait(entity_id, traits[1])
    return world


async def run_with_host(settings, traits: list[str], fast_forward: bool, kill_host_at: int | None = None) -> dict:
    """TICKS ticks of the same world with its traits live in a fresh trait host, paced (100
    ticks/s) or fast-forward; every tick's state hash and carriers, the host's health, and the
    calls of each trait (``kill_host_at``: the host is killed once that many ticks ran)."""
    own = settings.override(
        engine_tick_rate=100.0,
        engine_snapshot_interval=1,
        engine_fast_forward=fast_forward,
        # the claim is about a paced run that keeps its deadline: give it one a busy test machine keeps
        engine_trait_deadline_ms=10_000.0,
    )
    redis = aioredis.from_url(ENGINE_REDIS_URL)
    runner = HostTraitRunner(own, redis)
    world = carrying_world(traits)
    engine = Engine(own, runner, world=world)
    hashes: list[tuple[int, str]] = []
    carriers: dict[int, dict[str, int]] = {0: world.stats()["trait_usage"]}  # after each tick

    async def keep(snap: dict) -> None:
        hashes.append((snap["tick"], snap["state_hash"]))
        carriers[snap["tick"]] = snap["trait_usage"]

    engine.snapshot_hooks.append(keep)
    try:
        await engine.start()
        assert runner.active_traits() == sorted(traits)
        if kill_host_at is None:
            await engine.run(max_ticks=TICKS)
        else:
            await engine.run(max_ticks=kill_host_at)
            assert runner._host is not None
            await asyncio.to_thread(runner._host.host.kill)  # as if it died: the next tick finds it gone
            await engine.run(max_ticks=TICKS - kill_host_at)
        calls = {name: timing["calls"] for name, timing in runner.trait_timings().items()}
    finally:
        await engine.close()
        await redis.aclose()
    return {
        "hashes": sorted(hashes),
        "carriers": carriers,
        "stats": runner.stats,
        "trait_errors": engine.trait_errors,
        "overruns": engine.tick_overruns,
        "deadline_s": runner.deadline_s,
        "calls": calls,
    }


HEALTHY = {"restarts": 0, "deadline_misses": 0, "skipped_ticks": 0, "lost_results": 0, "quarantined": 0, "errors": 0}


def health(run: dict) -> dict[str, int]:
    """What must stay 0 for two runs to be comparable (docs/world.md#fast-forward)."""
    s = run["stats"]
    return {
        "restarts": s.restarts,
        "deadline_misses": s.deadline_misses,
        "skipped_ticks": s.skipped_ticks,
        "lost_results": s.lost_results,
        "quarantined": len(s.quarantined),
        "errors": run["trait_errors"],
    }


async def test_fast_forward_with_a_live_trait_host_has_the_paced_state_at_every_tick(engine_settings, live_traits):
    paced = await run_with_host(engine_settings, live_traits, fast_forward=False)
    fast = await run_with_host(engine_settings, live_traits, fast_forward=True)
    assert health(paced) == HEALTHY and health(fast) == HEALTHY
    assert [tick for tick, _ in paced["hashes"]] == list(range(1, TICKS + 1))
    assert fast["hashes"] == paced["hashes"]
    assert all(calls > 0 for calls in paced["calls"].values()) and fast["calls"] == paced["calls"]
    assert fast["overruns"] == 0
    assert paced["deadline_s"] == 10.0
    assert fast["deadline_s"] == engine_settings.engine.fast_forward_trait_deadline_ms / 1000


async def test_fast_forward_waits_for_a_restarted_host_instead_of_skipping_ticks(engine_settings, live_traits):
    killed_at = 40
    run = await run_with_host(engine_settings, live_traits, fast_forward=True, kill_host_at=killed_at)
    stats = run["stats"]
    assert stats.restarts == 1  # the tick that found the host dead ran on instinct ...
    assert stats.skipped_ticks == 0  # ... and the next one waited for the new host
    assert [tick for tick, _ in run["hashes"]] == list(range(1, TICKS + 1))
    # every other tick ran each trait once per carrier (the carriers at the tick's start)
    ran = [tick for tick in range(TICKS) if tick != killed_at]
    assert run["calls"] == {name: sum(run["carriers"][tick].get(name, 0) for tick in ran) for name in live_traits}


async def test_fast_forward_frames_keep_the_paced_rate(engine_settings):
    """Viewer frames describe the world and never change it: in fast-forward they are sent at
    most as often as a paced engine sends them, so a fast world does not flood Redis."""
    clock = FrameClock()
    own = engine_settings.override(engine_fast_forward=True, engine_tick_rate=60.0, engine_frame_interval=2)
    world = SteppedWorld(clock, WorldParams(initial_population=30), seed=5)
    engine = Engine(own, world=world, clock=clock)
    listener = aioredis.from_url(ENGINE_REDIS_URL)
    pubsub = listener.pubsub()
    await pubsub.subscribe(Channels.WORLD_FRAMES)  # a viewer: the engine builds frames for it
    try:
        await engine.start()
        await engine.sink.flush()  # the status write counted the subscriber
        assert engine.sink.frame_subscribers > 0
        await engine.run(max_ticks=300)  # 300 ms on the test's clock
        await engine.sink.flush()
    finally:
        await engine.close()
        await pubsub.aclose()
        await listener.aclose()
    built = engine.sink.counters["frames_published"] + engine.sink.counters["frames_skipped"]
    # paced: a frame every 2nd tick (150); fast-forward: one per 1/30 s of the clock (10)
    assert 1 <= built <= 10


class FrameClock:
    def __init__(self) -> None:
        self.t = 500.0

    def __call__(self) -> float:
        return self.t


class SteppedWorld(World):
    """Each step takes 1 ms of the test's clock."""

    def __init__(self, clock: FrameClock, params: WorldParams, seed: int) -> None:
        super().__init__(params, seed=seed)
        self._clock = clock

    def step(self, intents=None, lazy_write_back=False, forced=None):
        self._clock.t += 0.001
        return super().step(intents, lazy_write_back, forced)


async def test_the_harness_starts_a_fast_forward_engine(engine_settings):
    """`engine_process(settings, fast_forward=True)`: a real `python -m engine` that reports its
    mode and runs far above the paced tick rate (10 ticks/s here), through Redis and an API
    process of its own."""
    own = engine_settings.override(engine_tick_rate=10.0, api_port=free_port())
    engine = engine_process(fresh_journal(own, "fast-forward"), "engine-fast-forward", fast_forward=True)
    api = api_process(own, "api-fast-forward")
    redis = aioredis.from_url(ENGINE_REDIS_URL, decode_responses=True)
    engine.start()
    api.start()
    try:
        status = await wait_for_status(redis, engine, lambda st: int(st.get("tick", 0)) > 200)
        assert status["mode"] == "fast_forward"
        assert float(status["ticks_per_second"]) > 5 * own.engine.tick_rate
        assert int(status["tick_overruns"]) == 0
        url = await asyncio.to_thread(wait_for_api, api)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            state = (await http.get("/api/world/state")).json()
            stats = (await http.get("/api/stats")).json()
        assert state["mode"] == stats["mode"] == "fast_forward"
        assert state["ticks_per_second"] > 5 * own.engine.tick_rate
    finally:
        api.stop()
        engine.stop()
        await redis.aclose()


async def wait_for_status(redis, process, ready, timeout_s: float = 60.0) -> dict[str, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        status = await redis.hgetall(keys.ENGINE_STATUS)
        if status and float(status.get("ticks_per_second", 0)) > 0 and ready(status):
            return status
        if time.monotonic() > deadline or process.proc.poll() is not None:
            raise AssertionError(f"the engine did not report (last status {json.dumps(status)}); {process.log_path}")
        await asyncio.sleep(0.2)
