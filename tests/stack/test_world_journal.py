"""The journal with the real parts: three live traits in a real trait-host container write 4,000
ticks of journal; then replay from every kept snapshot reproduces every later state hash with no
trait host and no container started (several seeds). And a rollback through the engine's intake
(Redis), as an operator's REST call puts it there, is a new epoch the journal only grows by."""

from __future__ import annotations

import json
import os

import docker
import httpx
import pytest
import redis.asyncio as aioredis

from bench.engine import validated_traits
from engine.core.model import world_params
from engine.core.replay import KIND_ROLLBACK, KIND_TICK, Replay, header_at
from engine.core.verify import verify_range
from engine.core.world import World
from engine.process.journaling import WorldJournal
from engine.process.live_traits import HostTraitRunner
from engine.process.loop import Engine
from engine.process.rollbacks import RollbackFollower
from genesis import redis_keys as keys
from journal.reader import JournalReader
from journal.snapshots import SnapshotStore
from pipeline import registry
from tests import agents

ENGINE_REDIS_URL = os.environ.get("GENESIS_TEST_ENGINE_REDIS_URL", "redis://127.0.0.1:6379/13")
TICKS = 4_000
SNAPSHOT_EVERY = 1_000


@pytest.fixture
async def engine_redis():
    redis = aioredis.from_url(ENGINE_REDIS_URL)
    await redis.flushdb()
    for entry in validated_traits(3):
        await registry.put_entry(redis, entry)
    yield redis
    await redis.flushdb()
    await redis.aclose()


def trait_host_containers() -> int:
    client = docker.from_env()
    try:
        return len(client.containers.list(filters={"name": "genesis-sbx-"}))
    finally:
        client.close()


async def journaled_run(settings, journal_dir, seed: int, redis, ticks: int) -> Engine:
    own = settings.override(
        redis_url=ENGINE_REDIS_URL,
        engine_seed=seed,
        engine_initial_population=50,
        engine_min_population=20,
        engine_max_population=90,
        engine_trait_gain_chance=1.0,
        engine_fast_forward=True,
        engine_snapshot_interval=10**6,  # no telemetry snapshots: nothing observes this world
        journal_dir=journal_dir,
        journal_snapshot_interval=SNAPSHOT_EVERY,
    )
    journal, world = WorldJournal.open(own, lambda: World(world_params(own.engine), seed=seed))
    runner = HostTraitRunner(own, redis)
    engine = Engine(own, runner, world=world, journal=journal)
    try:
        await engine.run_ticks(ticks)
    finally:
        await engine.close()
        journal.close()
    stats = runner.stats
    health = (stats.restarts, stats.deadline_misses, stats.skipped_ticks, stats.quarantined, engine.trait_errors)
    assert health == (0, 0, 0, [], 0), f"the trait host was not whole: {health}"
    return engine


@pytest.mark.parametrize("seed", [5, 17, 41])
async def test_replay_from_every_snapshot_of_a_live_run_needs_no_trait_host(settings, engine_redis, tmp_path, seed):
    await journaled_run(settings, tmp_path, seed, engine_redis, TICKS)
    reader = JournalReader(tmp_path / "records")
    ticks = [r for r in reader.records() if r.header.kind == KIND_TICK]
    assert len(ticks) == TICKS
    hosts = {r.inputs["host"] for r in ticks}
    assert "ok" in hosts and hosts <= {"ok", "idle"}, hosts  # the host answered; it never failed
    assert sum("intents" in r.inputs for r in ticks) > TICKS // 2
    store = SnapshotStore(tmp_path / "snapshots")
    metas = store.kept()
    assert [m.tick for m in metas] == list(range(0, TICKS + 1, SNAPSHOT_EVERY))
    containers = trait_host_containers()
    head = reader.head()
    assert head is not None
    for meta in metas:
        replay = Replay.from_snapshot(store, meta, header_at(reader, meta.journal_seq))
        for record in reader.records(from_seq=meta.journal_seq + 1):
            found = replay.check(record)
            assert found is None, found.to_data()
        assert replay.world.tick == TICKS
    assert trait_host_containers() == containers  # replay started none
    report = verify_range(tmp_path, 0, TICKS)
    assert report["equal"] and report["ticks_checked"] == TICKS, report


async def test_a_rollback_is_a_new_epoch_and_the_journal_only_grows(settings, engine_redis, tmp_path):
    own = settings.override(
        redis_url=ENGINE_REDIS_URL,
        engine_initial_population=40,
        engine_fast_forward=True,
        engine_snapshot_interval=10**6,
        journal_dir=tmp_path,
        journal_snapshot_interval=200,
    )
    journal, world = WorldJournal.open(own, lambda: World(world_params(own.engine), seed=own.engine.seed))
    engine = Engine(own, HostTraitRunner(own, engine_redis), world=world, journal=journal)
    follower = RollbackFollower(engine, engine_redis)
    try:
        await engine.run_ticks(650)
        before = JournalReader(tmp_path / "records").head()
        assert before is not None
        for request in (
            {"request_id": "rbk_0000000000000001", "tick": 450, "reason": "test: back to 400"},
            {"request_id": "rbk_0000000000000002", "snapshot": "snap-nope.gsn", "reason": "test"},
        ):
            await engine_redis.rpush(keys.WORLD_ROLLBACK_REQUESTS, json.dumps(request))
        await follower.poll()  # the engine takes the requests ...
        await engine.run_ticks(100)  # ... and applies them before its next tick
        await follower.poll()  # the outcomes are published
        applied = json.loads(await engine_redis.get(keys.world_rollback("rbk_0000000000000001")))
        refused = json.loads(await engine_redis.get(keys.world_rollback("rbk_0000000000000002")))
        listed = json.loads(await engine_redis.get(keys.ENGINE_SNAPSHOTS))
    finally:
        await engine.close()
        journal.close()
    assert applied["status"] == "applied" and applied["epoch"] == 1
    assert applied["from_tick"] == 650 and applied["to_tick"] == 400 and applied["from_epoch"] == 0
    assert refused["status"] == "refused" and "not kept" in refused["reason"]
    assert engine.world.tick == 500
    reader = JournalReader(tmp_path / "records")
    records = list(reader.records())
    assert reader.verify_chain().ok
    # the journal only grew: every record of the abandoned epoch is still there, then the rollback
    assert [r.header for r in records[: before.seq + 1]][-1] == before
    rollback = records[before.seq + 1]
    assert rollback.header.kind == KIND_ROLLBACK and rollback.header.epoch == 1
    assert rollback.inputs["from_tick"] == 650 and rollback.inputs["to_tick"] == 400
    assert rollback.inputs["reason"] == "test: back to 400"
    store = SnapshotStore(tmp_path / "snapshots")
    target = next(m for m in store.kept() if m.name == rollback.inputs["snapshot"])
    assert rollback.header.state_hash == target.state_hash  # the state after it is the snapshot's
    assert all(r.header.epoch == 1 for r in records[before.seq + 1 :])
    assert any(s["epoch"] == 1 and s["tick"] == 400 for s in listed)  # the new epoch's first snapshot
    # replay across the rollback, and of the new epoch's ticks 400..500, reproduces every hash
    report = verify_range(tmp_path, 300, 500)
    assert report["equal"] and report["epoch"] == 1, report


async def test_an_operator_takes_the_world_back_to_before_a_mutation(engine_redis, tmp_path, settings, start_api):
    """When a version went live the engine pinned the latest snapshot before it; an operator's
    ``POST /v1/world/rollback {"mutation_id"}`` names only the mutation, and the engine goes back
    to that snapshot, recording who asked and why."""
    from tests.journal_worlds import LABELLER_RETURNS, journal_settings, journaled_engine

    api_url = await start_api("api-rewind", redis_url=ENGINE_REDIS_URL)
    operator = await agents.operator_headers(settings)
    engine = journaled_engine(journal_settings(tmp_path, 4, journal_snapshot_interval=100))
    follower = RollbackFollower(engine, engine_redis)
    harmful = "mut_1abe02"  # the labeller's second version, live from tick 400
    try:
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
            await engine.run_ticks(650)
            pinned = engine.journal.pins[harmful]
            assert f"-t{LABELLER_RETURNS:012d}-" in pinned  # the snapshot of the world just before it
            for bad in ({"mutation_id": "harmful", "reason": "x"}, {"mutation_id": harmful, "tick": 5, "reason": "x"}):
                refused = await http.post("/v1/world/rollback", json=bad, headers=operator)
                assert refused.status_code == 422, refused.text
            body = {"mutation_id": harmful, "reason": "its trait starved the world"}
            accepted = await http.post("/v1/world/rollback", json=body, headers=operator)
            assert accepted.status_code == 202, accepted.text
            await follower.poll()
            await engine.run_ticks(1)
            await follower.poll()
            outcome = (await http.get(accepted.json()["status_url"])).json()
    finally:
        await engine.close()
        engine.journal.close()
    assert outcome["status"] == "applied" and outcome["snapshot"] == pinned and outcome["to_tick"] == LABELLER_RETURNS
    rollbacks = [r for r in JournalReader(tmp_path / "records").records() if r.header.kind == KIND_ROLLBACK]
    assert len(rollbacks) == 1 and rollbacks[0].inputs["reason"] == "its trait starved the world"
    assert rollbacks[0].inputs["request"]["mutation_id"] == harmful
    assert rollbacks[0].inputs["request"]["requested_by"].startswith("operator")
