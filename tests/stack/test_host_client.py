"""One client of the trait host: the sandbox test's requests and the live engine's are the same
requests, so the same trait over the same views makes byte-identical intents through both."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import docker
import numpy as np
import redis.asyncio as aioredis

from engine.process.live_traits import LATE_TICKS_TO_RESTART, HostTraitRunner
from pipeline import registry
from sandbox import image
from sandbox.container import TraitHostContainer
from sandbox.host_client import MISSED, OK, HostClient
from tests import trait_hosts
from tests.own_stack import redis_db_below

# Uses every kind of intent and a value that is not a float (an int, a string).
BUSY = """import math

class Busy:
    async def execute(self, entity) -> None:
        found = entity.nearest_resource()
        if found is not None and entity.energy < 70:
            entity.move_towards(entity.x + found[0], entity.y + found[1])
            entity.eat()
        else:
            entity.move(math.cos(entity.age * 0.1), 1)
        entity.state = "e%d" % int(entity.energy)
        entity.speed = 1.5
"""


@asynccontextmanager
async def live_runner(settings, **changes) -> AsyncIterator[HostTraitRunner]:
    """The live engine's trait runner with BUSY live (alice's), on a registry of its own."""
    own = settings.override(redis_url=redis_db_below(7), **changes)
    redis = aioredis.from_url(own.redis_url)
    await redis.flushdb()
    await registry.put_entry(redis, trait_hosts.registry_entry("busy", BUSY, "alice", 400))
    runner = HostTraitRunner(own, redis)
    try:
        await runner.refresh()
        yield runner
    finally:
        await runner.close()
        await redis.flushdb()
        await redis.aclose()


async def test_the_sandbox_test_and_the_live_engine_get_identical_intents(settings):
    world = trait_hosts.crowd(["busy"], 60, seed=13)
    client = docker.from_env()
    sandbox_side = HostClient(TraitHostContainer(client, image.ensure(client), trait_hosts.LIMITS, "test-one-client"))
    try:
        sandbox_side.host.say_hello(trait_hosts.hello(), 20)
        assert sandbox_side.load("busy", BUSY, "Busy") is None  # as the sandbox test loads it: no owner
        async with live_runner(settings) as runner:
            for _ in range(5):
                views = world.trait_views(["busy"], raw=True)
                live = await runner.run_tick_views(world.tick, views)
                assert runner.last_outcome[0] == OK, runner.last_outcome
                tested = sandbox_side.tick(
                    world.tick, views, ["busy"], 10.0, agent_of={"busy": ""}, complete=True, count_blocks=True
                )
                assert tested.ok, tested.why
                for column in ("entity", "kind", "attr", "a", "b"):
                    assert getattr(live, column).tobytes() == getattr(tested.intents, column).tobytes(), column
                assert live.names == tested.intents.names
                assert live.over_a == tested.intents.over_a and live.over_b == tested.intents.over_b
                assert len(live) == len(world.entities) and np.any(live.kind == ord("e"))
                world.step(live)
    finally:
        sandbox_side.close()


def stalled(client: docker.DockerClient, container_id: str, seconds: float) -> threading.Timer:
    """The container frozen (as a machine too busy for a moment would stall it) for ``seconds``."""
    container = client.containers.get(container_id)
    container.pause()

    def unpause() -> None:
        try:
            container.unpause()
        except docker.errors.APIError:  # killed meanwhile for missing its deadline
            pass

    thaw = threading.Timer(seconds, unpause)
    thaw.start()
    return thaw


def test_a_reply_within_the_grace_is_used_and_the_host_lives():
    client = docker.from_env()
    host = HostClient(trait_hosts.start(client, "test-host-grace"))
    world = trait_hosts.crowd(["busy"], 30, seed=5)
    try:
        assert host.load("busy", BUSY, "Busy", "alice") is None
        views = world.trait_views(["busy"], raw=True)
        on_time = host.tick(world.tick, views, ["busy"], 2.0, grace_s=2.0)
        assert on_time.ok and not on_time.late
        thaw = stalled(client, host.id, 0.6)  # frozen past the 0.3 s deadline, thawed within its grace
        late = host.tick(world.tick, views, ["busy"], 0.3, grace_s=1.5)
        thaw.join()
        assert late.ok and late.late, late.why
        assert len(late.intents) == len(world.entities)
        assert host.tick(world.tick, views, ["busy"], 2.0).ok  # the same host answers the next tick
        thaw = stalled(client, host.id, 0.6)  # without a grace the same stall kills the host
        missed = host.tick(world.tick, views, ["busy"], 0.3)
        thaw.join()
        assert missed.outcome == MISSED and "within 0.30s" in missed.why
    finally:
        host.close()


async def test_the_live_engine_uses_late_replies_and_replaces_a_host_late_three_times_in_a_row(settings):
    world = trait_hosts.crowd(["busy"], 30, seed=5)
    client = docker.from_env()
    async with live_runner(settings, engine_trait_deadline_ms=400) as runner:
        views = world.trait_views(["busy"], raw=True)
        await runner.run_tick_views(world.tick, views)
        assert runner.last_outcome[0] == OK and runner._host is not None
        first = runner._host.id
        for late in range(1, LATE_TICKS_TO_RESTART + 1):
            thaw = await asyncio.to_thread(stalled, client, first, 0.6)
            intents = await runner.run_tick_views(world.tick, views)
            await asyncio.to_thread(thaw.join)
            assert runner.last_outcome[0] == OK and len(intents) == len(world.entities), runner.last_outcome
            assert runner.stats.late_ticks == late
            assert runner.stats.restarts == (late == LATE_TICKS_TO_RESTART)
        assert runner.stats.skipped_ticks == 0
