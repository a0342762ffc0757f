"""The engine process: fixed-timestep loop, telemetry to Redis (db 13) and Postgres
(genesis_test), trait-runner integration, and the world API over HTTP / WebSocket.

In-process tests drive the loop with ``Engine.run_ticks`` (no pacing) or ``Engine.run`` with a
fake clock, so nothing here depends on how fast the machine is. Performance figures are printed
(``-s``), never asserted."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis.asyncio as aioredis
from sqlalchemy import select

from cli.processes import free_port
from engine.core.world import World, WorldParams
from engine.process.loop import Engine
from engine.process.telemetry import SEED_FIELDS, SNAPSHOT_FIELDS, build_frame
from genesis import redis_keys as keys
from genesis.db.models import WorldSnapshot
from genesis.db.session import get_engine
from genesis.redis_keys import Channels
from tests.services import ENGINE_REDIS_URL

DEADLINE_S = 30.0  # generous upper bound for eventual conditions (never a performance claim)


@pytest.fixture
async def engine_settings(settings):
    """Test settings for in-process engines: Redis ENGINE_REDIS_URL (db 13, flushed), the test Postgres."""
    r = aioredis.from_url(ENGINE_REDIS_URL)
    await r.flushdb()
    await r.aclose()
    return settings.override(redis_url=ENGINE_REDIS_URL, engine_tick_rate=60.0, engine_snapshot_interval=300)


@pytest.fixture
async def redis13():
    r = aioredis.from_url(ENGINE_REDIS_URL, decode_responses=True)
    yield r
    await r.aclose()


async def _next_message(pubsub, timeout: float = DEADLINE_S) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1.0)
        if msg is not None:
            return msg
    raise AssertionError("no pub/sub message arrived")


# -- telemetry ------------------------------------------------------------------------------


async def test_snapshot_at_tick_300_lands_in_redis_with_every_field(engine_settings, redis13):
    pubsub = redis13.pubsub()
    await pubsub.subscribe(Channels.TELEMETRY)
    await _next_message_subscribed(pubsub)
    engine = Engine(engine_settings)
    try:
        await engine.run_ticks(299)
        await engine.sink.flush()
        assert await redis13.keys("ws:snapshot:*") == []
        await engine.run_ticks(1)
        await engine.sink.flush()
        key = keys.world_snapshot(300)
        snap = await redis13.hgetall(key)
        assert set(SEED_FIELDS) <= set(snap) and set(SNAPSHOT_FIELDS) <= set(snap)
        assert all(isinstance(v, str) for v in snap.values())
        assert int(snap["tick"]) == 300 and int(snap["entity_count"]) == len(engine.world.entities)
        assert snap["state_hash"] == engine.world.state_hash()
        assert float(snap["temperature"]) == engine.world.params.temperature
        deaths = sum(int(snap[f"death_{c}"]) for c in ("starvation", "age", "collision"))
        assert deaths == int(snap["deaths_last_period"])
        assert isinstance(json.loads(snap["trait_usage"]), dict)
        assert isinstance(json.loads(snap["trait_stats"]), dict)
        assert abs(float(snap["timestamp"]) - time.time()) < 3600
        assert 0 < await redis13.ttl(key) <= 300
        assert await redis13.get(keys.WORLD_TICK) == "300"
        # Pub/sub channels are shared by every Redis db: skip other engines' announcements
        # (another test run on the same machine), wait for this one's.
        expected = {"tick": 300, "snapshot_key": "ws:snapshot:300"}
        deadline = time.monotonic() + DEADLINE_S
        while (event := json.loads((await _next_message(pubsub))["data"])) != expected:
            assert time.monotonic() < deadline, f"no announcement of tick 300 (last: {event})"
    finally:
        await engine.close()
        await pubsub.aclose()


async def _next_message_subscribed(pubsub) -> None:
    """Wait for the subscribe confirmation so no later message is missed."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        msg = await pubsub.get_message(timeout=1.0)
        if msg is not None and msg["type"] == "subscribe":
            return
    raise AssertionError("subscription was not confirmed")


async def test_every_30th_snapshot_lands_in_postgres(engine_settings):
    s = engine_settings.override(engine_snapshot_interval=10, engine_postgres_every=30)
    engine = Engine(s)
    try:
        await engine.run_ticks(290)
        await engine.sink.flush()
        db = get_engine(s.database_url)

        async def rows() -> list[WorldSnapshot]:
            async with db.connect() as conn:
                result = await conn.execute(
                    select(WorldSnapshot).where(WorldSnapshot.run_id == engine.run_id).order_by(WorldSnapshot.tick)
                )
                return list(result)

        assert await rows() == []  # 29 snapshots so far
        await engine.run_ticks(10)
        await engine.sink.flush()
        found = await rows()
        assert [r.tick for r in found] == [300]
        row = found[0]
        assert engine.snapshots_taken == 30
        assert row.state_hash == engine.world.state_hash()
        assert row.entity_count == len(engine.world.entities)
        assert row.data["tick"] == 300 and set(SNAPSHOT_FIELDS) <= set(row.data)
        assert engine.sink.counters["postgres_rows"] == 1
    finally:
        await engine.close()


async def test_status_params_and_entities_for_the_api(engine_settings, redis13):
    engine = Engine(engine_settings)
    try:
        await engine.run_ticks(5)
        engine.publish_status()
        await engine.sink.flush()
        status = await redis13.hgetall(keys.ENGINE_STATUS)
        assert int(status["tick"]) == 5 and int(status["population"]) == len(engine.world.entities)
        assert {"ticks_per_second", "tick_overruns", "started_at", "avg_energy", "active_traits"} <= set(status)
        assert await redis13.get(keys.WORLD_TICK) == "5"
        params = json.loads(await redis13.get(keys.ENGINE_PARAMS))
        assert WorldParams(**params) == engine.world.params
        ents = json.loads(await redis13.get(keys.ENGINE_ENTITIES))
        assert [e["id"] for e in ents] == sorted(engine.world.entities)[: engine_settings.engine.entities_limit]
        assert set(ents[0]) >= {"id", "x", "y", "energy", "max_energy", "age", "traits"}
    finally:
        await engine.close()


# -- determinism and the trait runner -------------------------------------------------------


class ForagerRunner:
    """A trusted, in-process stand-in for the trait host: 'forager' heads for food."""

    def __init__(self, active: list[str] | None = None):
        self.active = list(active or ["forager"])
        self.calls: list[tuple[int, list[str]]] = []
        self.refreshes = 0

    async def run_tick(self, tick, batches):
        self.calls.append((tick, sorted(batches)))
        out = {}
        for view in batches.get("forager", []):
            near = view["nearest_resource"]
            if near is not None:
                out[view["id"]] = [["move_towards", view["x"] + near[0], view["y"] + near[1]], ["eat"]]
        return out

    def active_traits(self):
        return list(self.active)

    async def refresh(self):
        self.refreshes += 1

    async def close(self):
        pass


async def test_snapshots_built_while_the_trait_host_computes_hold_their_own_tick(engine_settings):
    # A tick's snapshot is built at the next tick, while the (real) trait host computes that
    # tick's intents: it must still describe its own tick (state hash, tick).
    from bench.engine import validated_traits
    from engine.process.live_traits import HostTraitRunner
    from pipeline import registry

    s = engine_settings.override(engine_snapshot_interval=5, engine_trait_deadline_ms=10_000.0)
    redis = aioredis.from_url(ENGINE_REDIS_URL)
    entry = validated_traits(1)[0]  # bench/engine.py's wander trait, through the gatekeeper
    await registry.put_entry(redis, entry)
    world = World(WorldParams(initial_population=30), seed=21)
    world.set_available_traits([entry.trait_name])
    world.give_trait_to_all(entry.trait_name)
    runner = HostTraitRunner(s, redis)
    engine = Engine(s, runner, world=world)
    snapshots: list[dict] = []

    async def keep(snap: dict) -> None:
        snapshots.append(snap)

    engine.snapshot_hooks.append(keep)
    try:
        await engine.start()
        assert runner.active_traits() == [entry.trait_name]
        hashes, taken = {}, []
        for _ in range(16):
            await engine.tick_once()
            hashes[world.tick] = world.state_hash()
            taken.append(engine.snapshots_taken)
        await asyncio.sleep(0.1)  # the hooks run as tasks
        assert taken[4] == 0 and taken[5] == 1  # tick 5's snapshot was built during tick 6
        assert runner.stats.skipped_ticks == 0 and runner.stats.restarts == 0 and engine.trait_errors == 0
        assert [snap["tick"] for snap in snapshots] == [5, 10, 15]
        assert all(snap["state_hash"] == hashes[snap["tick"]] for snap in snapshots)
    finally:
        await engine.close()
        await redis.aclose()


async def test_a_replacement_keeps_every_carrier(engine_settings):
    """A new version of a live trait takes the old one's place in one step: at no tick does the
    engine see the trait gone, so no carrier loses it (the change is ``replaced``, not a leaving)."""
    from bench.engine import validated_traits
    from engine.process.live_traits import HostTraitRunner
    from pipeline import registry

    s = engine_settings.override(engine_trait_deadline_ms=10_000.0)
    redis = aioredis.from_url(ENGINE_REDIS_URL)
    old = validated_traits(1)[0]
    new = old.model_copy(update={"version": 2, "mutation_id": "mut_bench0002"})
    await registry.put_entry(redis, old)
    world = World(WorldParams(initial_population=40), seed=5)
    world.set_available_traits([old.trait_name])
    world.give_trait_to_all(old.trait_name)
    runner = HostTraitRunner(s, redis)
    engine = Engine(s, runner, world=world)

    def carriers() -> int:
        return sum(1 for e in world.entities.values() if old.trait_name in e.traits)

    try:
        await engine.start()
        await engine.tick_once()
        assert engine.trait_versions == {old.trait_name: old.mutation_id} and carriers() > 0
        await registry.put_entry(redis, new)
        refreshing = asyncio.create_task(runner.refresh())
        seen, after = [], 0
        while after < 3:  # ticks while the new version loads, and three after
            await engine.tick_once()
            seen.append((engine.trait_versions.get(old.trait_name), carriers(), len(world.entities)))
            after += refreshing.done()
            await asyncio.sleep(0)
        await refreshing
        assert engine.trait_versions == {old.trait_name: new.mutation_id}, seen
        assert all(version is not None for version, *_ in seen), seen  # never without the trait
        assert all(n == alive for _, n, alive in seen), seen  # every Molbot alive still carries it
        assert runner.stats.restarts == 0 and engine.trait_errors == 0
    finally:
        await engine.close()
        await redis.aclose()


async def test_same_seed_same_state_hash(engine_settings):
    s = engine_settings.override(engine_trait_gain_chance=1.0, engine_snapshot_interval=100)
    hashes = []
    for seed in (7, 7, 8):
        engine = Engine(s.override(engine_seed=seed), ForagerRunner())
        try:
            await engine.run_ticks(600)
            hashes.append(engine.world.state_hash())
            carriers = engine.world.stats()["trait_usage"].get("forager", 0)
        finally:
            await engine.close()
    assert hashes[0] == hashes[1] != hashes[2]
    assert carriers > 0  # newborns picked up the active trait


async def test_active_traits_become_available_and_inactive_ones_are_removed(engine_settings):
    runner = ForagerRunner(["forager", "swimmer"])
    engine = Engine(engine_settings, runner)
    world = engine.world
    try:
        await engine.run_ticks(1)
        assert world.available_traits == ("forager", "swimmer")
        assert runner.calls == []  # no carriers yet: the trait host is not called
        ids = sorted(world.entities)
        world.give_trait(ids[0], "forager")
        world.give_trait(ids[0], "swimmer")
        world.give_trait(ids[1], "swimmer")
        await engine.run_ticks(1)
        assert runner.calls[-1][1] == ["forager", "swimmer"]
        runner.active = ["forager"]  # swimmer rolled back (or quarantined)
        await engine.run_ticks(1)
        assert world.available_traits == ("forager",)
        assert all("swimmer" not in e.traits for e in world.entities.values())
        assert runner.calls[-1][1] == ["forager"]
        runner.active = []
        await engine.run_ticks(3)
        assert world.stats()["trait_usage"] == {} and len(runner.calls) == 2
    finally:
        await engine.close()


async def test_a_failing_trait_runner_never_stops_the_world(engine_settings):
    class Broken(ForagerRunner):
        async def run_tick(self, tick, batches):
            raise RuntimeError("host on fire")

    engine = Engine(engine_settings, Broken())
    engine.world.give_trait_to_all("forager")
    try:
        await engine.run_ticks(20)
        assert engine.world.tick == 20 and engine.trait_errors == 20
    finally:
        await engine.close()


# -- the fixed-timestep loop ------------------------------------------------------------------


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class CostlyWorld(World):
    """Each step 'takes' cost[tick] seconds of the fake clock."""

    def __init__(self, clock: FakeClock, costs: dict[int, float], default: float, **kw):
        super().__init__(**kw)
        self._clock, self._costs, self._default = clock, costs, default

    def step(self, intents=None, lazy_write_back=False, forced=None):
        self._clock.t += self._costs.get(self.tick, self._default)
        return super().step(intents, lazy_write_back, forced)


async def test_loop_paces_counts_overruns_and_catches_up_by_not_sleeping(engine_settings):
    clock = FakeClock()
    sleeps: list[float] = []

    async def fake_sleep(delay: float) -> None:
        sleeps.append(delay)
        clock.t += delay
        await asyncio.sleep(0)

    budget = 1 / 60
    costs = {3: 0.040, 10: 0.5}  # one overrun that is caught up, one lag beyond MAX_LAG_S
    world = CostlyWorld(clock, costs, 0.005, params=WorldParams(), seed=1)
    engine = Engine(engine_settings, world=world, clock=clock, sleep=fake_sleep)
    try:
        await engine.run(max_ticks=20)
    finally:
        await engine.close()
    assert world.tick == 20 and len(sleeps) == 20  # one tick per iteration, never a burst
    assert all(d >= 0 for d in sleeps)
    assert engine.tick_overruns == 2 and engine.lag_resets == 1
    assert sleeps[0] == pytest.approx(budget - 0.005)
    # after the 40 ms tick (tick 3) the loop is 23.3 ms behind: it runs on without sleeping
    assert sleeps[3] == 0 and sleeps[4] == 0
    assert sleeps[5] == pytest.approx(0, abs=1e-9)  # exactly back on schedule
    assert sleeps[6] == pytest.approx(budget - 0.005)
    assert sleeps[10] == 0  # 0.5 s behind: the schedule is reset ...
    assert sleeps[11] == pytest.approx(budget - 0.005)  # ... and pacing resumes normally
    print(f"\nloop schedule (fake clock): sleeps ms = {[round(d * 1000, 2) for d in sleeps]}")


async def test_loop_survives_redis_and_postgres_being_unreachable(engine_settings):
    closed = free_port()
    s = engine_settings.override(
        redis_url=f"redis://127.0.0.1:{closed}/0",
        database_url=f"postgresql+asyncpg://genesis:genesis@127.0.0.1:{closed}/nope",
        engine_tick_rate=5000.0,
        engine_snapshot_interval=10,
        engine_postgres_every=1,
    )
    engine = Engine(s)
    try:
        await engine.run(max_ticks=300)
        await engine.sink.flush()
        assert engine.world.tick == 300 and engine.snapshots_taken == 30
        assert engine.sink.counters["redis_errors"] >= 1
        assert engine.sink.counters["snapshots_written"] == 0
        assert engine.sink.counters["postgres_errors"] == 30
        await engine.run_ticks(100)  # still ticking
        assert engine.world.tick == 400
    finally:
        await engine.close()


async def test_telemetry_resumes_after_redis_comes_back(engine_settings, tmp_path):
    port = free_port()
    argv = ["redis-server", "--port", str(port), "--save", "", "--appendonly", "no", "--dir", str(tmp_path)]

    async def start_redis():
        proc = await asyncio.create_subprocess_exec(*argv, stdout=asyncio.subprocess.DEVNULL)
        probe = aioredis.from_url(f"redis://127.0.0.1:{port}/0")
        deadline = time.monotonic() + DEADLINE_S
        while True:
            try:
                await probe.ping()
                break
            except Exception:
                assert time.monotonic() < deadline, "redis-server did not start"
                await asyncio.sleep(0.05)
        await probe.aclose()
        return proc

    s = engine_settings.override(
        redis_url=f"redis://127.0.0.1:{port}/0", engine_tick_rate=2000.0, engine_snapshot_interval=10
    )
    server = await start_redis()
    engine = Engine(s)
    try:
        await engine.run_ticks(10)
        await engine.sink.flush()
        assert engine.sink.counters["snapshots_written"] == 1
        server.terminate()
        await server.wait()
        await engine.run_ticks(50)
        await engine.sink.flush()
        assert engine.sink.counters["redis_errors"] >= 1 and not engine.sink.redis_up
        server = await start_redis()
        written = engine.sink.counters["snapshots_written"]
        deadline = time.monotonic() + DEADLINE_S
        while engine.sink.counters["snapshots_written"] == written:  # backoff, then it reconnects
            assert time.monotonic() < deadline, "telemetry did not resume"
            await engine.run(max_ticks=20)
            await engine.sink.flush()
        assert engine.sink.redis_up
    finally:
        await engine.close()
        if server.returncode is None:
            server.terminate()
            await server.wait()


# -- performance (printed, not asserted) ------------------------------------------------------


async def test_print_tick_and_snapshot_cost(engine_settings):
    s = engine_settings.override(
        engine_initial_population=200, engine_min_population=200, engine_snapshot_interval=10_000_000
    )
    engine = Engine(s)
    try:
        await engine.run_ticks(50)  # warm-up
        engine.ticks_run, engine.work_total_s, engine.work_max_s = 0, 0.0, 0.0
        await engine.run_ticks(600)
        mean_ms, max_ms = engine.mean_tick_ms(), engine.work_max_s * 1000
        n = len(engine.world.entities)
        t0 = time.perf_counter()
        reps = 20  # below the sink's queue size: none is dropped
        for _ in range(reps):
            engine._snapshot(engine.world.tick)
        build_ms = (time.perf_counter() - t0) / reps * 1000
        t0 = time.perf_counter()
        await engine.sink.flush()
        write_ms = (time.perf_counter() - t0) / reps * 1000
        assert engine.sink.counters["snapshots_written"] == reps
        frame_ms = _time_ms(lambda: build_frame(engine.world))
    finally:
        await engine.close()
    print(
        f"\nengine: {n} entities, no traits: mean tick {mean_ms:.3f} ms, max {max_ms:.3f} ms "
        f"(budget 16.67 ms); snapshot build {build_ms:.3f} ms in the tick, "
        f"Redis pipeline + publish {write_ms:.3f} ms off the tick; viewer frame {frame_ms:.3f} ms"
    )


def _time_ms(fn, reps: int = 50) -> float:
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps * 1000


# -- the API over HTTP, with a real engine process ---------------------------------------------


async def test_world_endpoints_over_http(http, engine_proc):
    state = (await http.get("/api/world/state")).json()
    assert state["tick"] >= 0 and state["population"] > 0 and state["running"] is True
    assert state["params"]["width"] > 0 and "max_traits_per_entity" in state["params"]

    r = await http.get("/api/world/entities", params={"limit": 5})
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == len(body["entities"]) == 5
    assert [e["id"] for e in body["entities"]] == sorted(e["id"] for e in body["entities"])
    assert set(body["entities"][0]) >= {"id", "x", "y", "energy", "max_energy", "age", "traits"}

    for bad in ("0", "501", "many"):
        r = await http.get("/api/world/entities", params={"limit": bad})
        assert r.status_code == 422, bad
        assert r.json()["error"] == "VALIDATION_ERROR" and "limit" in r.json()["detail"]

    stats = (await http.get("/api/stats")).json()
    assert set(stats) >= {
        "tick",
        "ticks_per_second",
        "population",
        "avg_energy",
        "active_traits",
        "mutations_applied",
        "tick_overruns",
    }
    assert isinstance(stats["mutations_applied"], int) and isinstance(stats["active_traits"], list)


async def test_ws_world_relays_frames(api_url, engine_proc):
    from websockets.asyncio.client import connect

    url = api_url.replace("http://", "ws://") + "/ws/world"
    async with connect(url) as ws:
        frames = []
        for _ in range(3):
            frames.append(json.loads(await asyncio.wait_for(ws.recv(), DEADLINE_S)))
    assert frames[0]["tick"] < frames[-1]["tick"]
    assert all(f["tick"] % 2 == 0 for f in frames)
    ent = frames[-1]["entities"][0]
    assert len(ent) == 6 and isinstance(ent[0], int) and (ent[4] is None or isinstance(ent[4], str))
    names = frames[-1]["traits"]  # every carried trait, by index: the newest is the dot's colour
    assert all(0 <= i < len(names) for e in frames[-1]["entities"] for i in e[5])
    assert all(e[4] == (names[e[5][-1]] if e[5] else None) for e in frames[-1]["entities"])
    assert all(len(r) == 2 for r in frames[-1]["resources"])


async def test_engine_not_running_is_503(engine_settings):
    """An API whose Redis has never seen an engine (db 13, flushed) answers 503 ENGINE_NOT_RUNNING."""
    from fastapi.testclient import TestClient

    from api.app import create_app
    from genesis.db.session import get_engine

    def calls():
        with TestClient(create_app(engine_settings)) as client:
            return [client.get(path) for path in ("/api/world/state", "/api/world/entities", "/api/stats")]

    # The app runs in a thread and an event loop of its own but shares the process's cached
    # database engine: it must find no pooled connection of this loop, and leave none of its own.
    database = get_engine(engine_settings.database_url)
    await database.dispose()
    try:
        answers = await asyncio.to_thread(calls)
    finally:
        await database.dispose(close=False)
    for r in answers:
        assert r.status_code == 503
        assert r.json()["error"] == "ENGINE_NOT_RUNNING" and "python -m engine" in r.json()["detail"]
