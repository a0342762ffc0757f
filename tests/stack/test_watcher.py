"""The Watcher on real Redis and Temporal (the worker runs the TaskWorkflows): snapshots are
written the way the engine writes them (engine/process/telemetry.py) and announced on ``ch:telemetry``;
an anomaly gives exactly one WorldReport, one task and one feed message; the cooldown holds a
repeat back, critical ignores it; a trigger storm opens the circuit breaker."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta

import pytest
import redis.asyncio as aioredis
from sqlalchemy import delete

from engine.process.telemetry import to_redis_hash
from evolution import cycles
from evolution.watcher import (
    COOLDOWN,
    GO,
    NO_ANOMALY,
    PAUSED,
    RUNNING_CYCLE_HORIZON_S,
    TRIPPED,
    UNCHANGED,
    Watcher,
    cooldown_key,
)
from genesis import redis_keys as keys
from genesis.db.models import EvolutionCycle
from genesis.db.session import get_sessionmaker
from genesis.dto import AgentTask, TaskResult
from genesis.redis_keys import Channels
from genesis.workflow_api import TASK_SIGNAL_RESOLVE, task_workflow_id
from tests.evolution_worlds import BASE

ENERGY_CRISIS = {"avg_energy": 12.0}  # from 60: trend -48 -> energy_crisis (high)
EXTINCTION = {"entity_count": 90, "deaths_last_period": 80, "death_starvation": 80, "death_age": 0}  # critical
LOW_DIVERSITY = {"trait_diversity": 1}  # medium -> a high task


@pytest.fixture
async def redis_client(settings):
    client = aioredis.from_url(settings.redis_url)
    await _clear(client)
    yield client
    await _clear(client)
    await client.aclose()


async def _clear(client) -> None:
    stale = [k async for k in client.scan_iter(match="ws:snapshot:*")]
    stale += [k async for k in client.scan_iter(match="watcher:*")]
    if stale:
        await client.delete(*stale)
    await client.delete(keys.WORLD_TICK)


@pytest.fixture
async def feed(redis_client):
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Channels.FEED)
    yield pubsub
    await pubsub.aclose()


@pytest.fixture
async def make_watcher(settings, redis_client, worker, temporal_client):
    """A Watcher in this process (cooldown 60 s unless changed); its tasks are resolved after the test."""
    made: list[Watcher] = []

    async def temporal():
        return temporal_client

    def make(sessions=None, **changes) -> Watcher:
        watcher = Watcher(settings.override(watcher_cooldown_s=60.0, **changes), redis_client, temporal, sessions)
        made.append(watcher)
        return watcher

    yield make
    for watcher in made:
        await watcher.drain()
        for outcome in watcher.outcomes:
            if outcome.task_id:
                try:
                    await temporal_client.get_workflow_handle(task_workflow_id(outcome.task_id)).signal(
                        TASK_SIGNAL_RESOLVE, "test over"
                    )
                except Exception:
                    pass


class World:
    """Writes snapshots as TelemetrySink._write_snapshot does and announces them."""

    def __init__(self, redis, interval: int):
        self.redis, self.interval = redis, interval
        self.tick, self.run_id = 0, uuid.uuid4().hex

    async def snapshot(self, **changes) -> str:
        self.tick += self.interval
        snap = {**BASE, **changes, "tick": self.tick, "timestamp": time.time(), "run_id": self.run_id}
        key = keys.world_snapshot(self.tick)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, mapping=to_redis_hash(snap))
            pipe.expire(key, keys.WORLD_SNAPSHOT_TTL_S)
            pipe.set(keys.WORLD_TICK, self.tick)
            await pipe.execute()
        await self.redis.publish(Channels.TELEMETRY, json.dumps({"tick": self.tick, "snapshot_key": key}))
        return key


async def feed_messages(pubsub, action: str | None = None, wait_s: float = 0.5) -> list[dict]:
    out, deadline = [], time.monotonic() + wait_s
    while time.monotonic() < deadline:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.1)
        if message:
            payload = json.loads(message["data"])
            if payload.get("agent") == "watcher" and (action is None or payload["action"] == action):
                out.append(payload)
    return out


async def wait_task(redis, task_id: str, timeout_s: float = 15) -> AgentTask:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = await redis.get(keys.agent_task(task_id))
        if body:
            return AgentTask.model_validate_json(body)
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task_id} never published")


async def watcher_tasks(redis) -> set[str]:
    ids = {t.decode() for t in await redis.zrange(keys.AGENT_TASKS_QUEUE, 0, -1)}
    out = set()
    for task_id in ids:
        body = await redis.get(keys.agent_task(task_id))
        if body and AgentTask.model_validate_json(body).source == "watcher":
            out.add(task_id)
    return out


async def test_anomaly_on_telemetry_gives_one_report_task_and_feed_message(settings, redis_client, feed, make_watcher):
    watcher = make_watcher()
    world = World(redis_client, settings.engine.snapshot_interval)
    stop, ready = asyncio.Event(), asyncio.Event()
    loop = asyncio.create_task(watcher.run(stop, ready))
    try:
        await asyncio.wait_for(ready.wait(), 5)
        tasks_before = await watcher_tasks(redis_client)
        await world.snapshot()  # one snapshot: no trend yet
        await world.snapshot()  # stable
        assert await feed_messages(feed, wait_s=0.5) == []
        key = await world.snapshot(**ENERGY_CRISIS)
        [message] = await feed_messages(feed, wait_s=1.5)
    finally:
        stop.set()
        await asyncio.wait_for(loop, 5)
    statuses = [o.status for o in watcher.outcomes]  # events may find a later snapshot already written
    assert statuses[-1] == GO and set(statuses[:-1]) == {NO_ANOMALY}, statuses
    assert message["action"] == "anomaly_detected" and message["problem_type"] == "energy_crisis"
    assert message["severity"] == "high" and message["timestamp"] == pytest.approx(time.time(), abs=5)
    assert "energy_crisis" in message["message"] and "population: 200" in message["message"]
    trigger_id, task_id = message["trigger_id"], message["task_id"]

    report_key = keys.evolution_trigger(trigger_id)
    report = {k.decode(): v.decode() for k, v in (await redis_client.hgetall(report_key)).items()}
    assert 590 <= await redis_client.ttl(report_key) <= 600
    assert report["problem_type"] == "energy_crisis" and report["severity"] == "high"
    assert report["suggested_area"] == "traits" and report["snapshot_key"] == key and report["task_id"] == task_id
    assert json.loads(report["deltas"])["energy_trend"] == pytest.approx(-48.0)
    assert [s["tick"] for s in json.loads(report["history_summary"])] == [world.tick, world.tick - 30, world.tick - 60]
    assert json.loads(report["death_breakdown"]) == {"starvation": 5, "collision": 0, "age": 5}

    task = await wait_task(redis_client, task_id)
    assert task.source == "watcher" and task.problem_type == "energy_crisis" and task.severity.value == "high"
    assert task.world_context["trigger_id"] == trigger_id and task.world_context["entity_count"] == 200
    assert await watcher_tasks(redis_client) - tasks_before == {task_id}  # exactly one


async def test_cooldown_holds_a_repeat_back_and_critical_ignores_it(settings, redis_client, feed, make_watcher):
    watcher = make_watcher()
    world = World(redis_client, settings.engine.snapshot_interval)
    await world.snapshot()
    await world.snapshot(**LOW_DIVERSITY)
    first = await watcher.analyze()
    assert first.status == GO and first.anomaly.type == "low_diversity" and first.anomaly.severity == "medium"
    assert 55 <= await redis_client.ttl(cooldown_key("low_diversity")) <= 60
    assert (await watcher.analyze()).status == UNCHANGED  # the same snapshot is analyzed once
    await world.snapshot(**LOW_DIVERSITY)
    assert (await watcher.analyze()).status == COOLDOWN
    assert len(await feed_messages(feed, "anomaly_detected")) == 1
    task = await wait_task(redis_client, first.task_id)
    assert task.severity.value == "high"  # the seed's medium is a high task

    await world.snapshot(**EXTINCTION)
    crit = await watcher.analyze()
    assert crit.status == GO and crit.anomaly.type == "starvation" and crit.anomaly.severity == "critical"
    await world.snapshot(**{**EXTINCTION, "entity_count": 40, "deaths_last_period": 45, "death_starvation": 45})
    again = await watcher.analyze()
    assert again.status == GO and again.anomaly.severity == "critical"  # cooldown ignored
    messages = await feed_messages(feed, "anomaly_detected")
    assert [m["trigger_id"] for m in messages] == [crit.trigger_id, again.trigger_id]
    assert (await wait_task(redis_client, again.task_id)).severity.value == "critical"


async def test_running_cycles_hold_new_cycles_back_but_not_the_task(settings, redis_client, feed, make_watcher):
    """While the limit of cycles runs, a trigger publishes its task but starts no cycle; a finished
    cycle and one still marked running past the horizon (its workflow lost) do not count."""
    sessions = get_sessionmaker(settings.database_url)
    now = datetime.now(UTC)
    since = now - timedelta(seconds=RUNNING_CYCLE_HORIZON_S)
    before = await cycles.count_running(sessions, since)  # other tests' cycles may run meanwhile
    rows = {
        f"trg_busy{n}{uuid.uuid4().hex[:8]}": (status, created)
        for n, (status, created) in enumerate(
            [
                ("running", now),
                ("running", now),
                ("succeeded", now),
                ("running", now - timedelta(seconds=RUNNING_CYCLE_HORIZON_S + 60)),
            ]
        )
    }
    async with sessions() as session:
        for trigger_id, (status, created) in rows.items():
            session.add(
                EvolutionCycle(
                    trigger_id=trigger_id,
                    workflow_id=f"evolution-{trigger_id}",
                    kind="anomaly",
                    stage="mutation_running",
                    status=status,
                    created_at=created,
                    updated_at=created,
                )
            )
        await session.commit()
    try:
        limit = before + 2
        watcher = make_watcher(sessions, watcher_max_running_cycles=limit, evolution_cycles_enabled=True)
        world = World(redis_client, settings.engine.snapshot_interval)
        await world.snapshot()
        await world.snapshot(**ENERGY_CRISIS)
        outcome = await watcher.analyze()
        assert outcome.status == GO and outcome.cycles_running == limit
        task = await wait_task(redis_client, outcome.task_id)
        assert task.problem_type == "energy_crisis"  # the task for external agents is published
        [message] = await feed_messages(feed, "anomaly_detected")
        assert message["workflow_id"] is None
        assert f"no evolution cycle started: {limit} still running (at most {limit} at once)" in message["message"]
        assert await cycles.get_cycle(sessions, outcome.trigger_id) is None
    finally:
        async with sessions() as session:
            await session.execute(delete(EvolutionCycle).where(EvolutionCycle.trigger_id.in_(list(rows))))
            await session.commit()


async def test_trigger_storm_opens_the_circuit_breaker(settings, redis_client, feed, make_watcher):
    watcher = make_watcher()
    world = World(redis_client, settings.engine.snapshot_interval)
    await world.snapshot()
    statuses = []
    for _ in range(7):
        await world.snapshot()  # 200 entities, then 90: a mass extinction each time
        await world.snapshot(**EXTINCTION)
        statuses.append((await watcher.analyze()).status)
    assert statuses == [GO] * 5 + [TRIPPED, PAUSED]
    assert await redis_client.get(keys.WATCHER_CIRCUIT_BREAKER) == b"1"
    assert 295 <= await redis_client.ttl(keys.WATCHER_CIRCUIT_BREAKER) <= 300
    messages = await feed_messages(feed)
    assert [m["action"] for m in messages] == ["anomaly_detected"] * 5 + ["circuit_breaker_activated"]
    assert "paused for 5 minutes" in messages[-1]["message"]
    assert messages[-1]["timestamp"] == pytest.approx(time.time(), abs=5)
    # The window counter starts over once the breaker closes.
    await redis_client.delete(keys.WATCHER_CIRCUIT_BREAKER)
    await world.snapshot()
    await world.snapshot(**EXTINCTION)
    assert (await watcher.analyze()).status == GO
    assert int(await redis_client.get(keys.WATCHER_TRIGGER_COUNTER)) == 1


async def test_operator_forces_a_trigger(settings, redis_client, feed, http, make_watcher, operator_http):
    await redis_client.delete(keys.WATCHER_FORCED_COUNTER)  # forced triggers of earlier modules (the fuzz)
    assert (await operator_http.post("/api/evolution/trigger", json={})).json()["error"] == "NO_SNAPSHOT"
    for bad, field in (
        ({"anomaly_type": "boredom"}, "anomaly_type"),
        ({"severity": "urgent"}, "severity"),
        ({"ttl": 5}, "ttl"),
    ):
        response = await operator_http.post("/api/evolution/trigger", json=bad)
        assert response.status_code == 422, response.text
        assert field in response.text
    world = World(redis_client, settings.engine.snapshot_interval)
    await world.snapshot()
    await world.snapshot()
    response = await operator_http.post("/api/evolution/trigger", json={})
    assert response.status_code == 409 and response.json()["error"] == "NO_ANOMALY"

    response = await operator_http.post("/api/evolution/trigger", json={"anomaly_type": "overpopulation"})
    assert response.status_code == 202, response.text
    body = response.json()
    assert body["problem_type"] == "overpopulation" and body["severity"] == "medium" and body["task_severity"] == "high"
    assert body["suggested_area"] == "physics" and body["tick"] == world.tick
    report = await redis_client.hgetall(body["report_key"])
    assert report[b"forced"] == b"1" and report[b"task_id"].decode() == body["task_id"]
    task = await wait_task(redis_client, body["task_id"])
    assert task.problem_type == "overpopulation" and task.source == "watcher"
    [message] = await feed_messages(feed, "anomaly_detected")
    assert message["trigger_id"] == body["trigger_id"] and message["forced"] is True
    try:
        again = await operator_http.post("/api/evolution/trigger", json={"anomaly_type": "overpopulation"})
        assert again.status_code == 409 and again.json()["error"] == "WATCHER_COOLDOWN"
    finally:
        await make_watcher().redis.delete(cooldown_key("overpopulation"))
        await operator_http.post(f"/api/agents/tasks/{body['task_id']}/resolve", json={"reason": "test over"})


async def test_a_task_ends_when_its_problem_clears(
    settings, redis_client, feed, make_watcher, operator_http, temporal_client
):
    """Two snapshots in a row without its problem end a Watcher's task, recorded as the Watcher's
    doing and why; an operator's task of the same problem is the operator's to end."""
    watcher = make_watcher()
    world = World(redis_client, settings.engine.snapshot_interval)
    await world.snapshot()
    await world.snapshot(**ENERGY_CRISIS)
    crisis = await watcher.analyze()
    assert crisis.status == GO and crisis.anomaly.type == "energy_crisis"
    await wait_task(redis_client, crisis.task_id)
    response = await operator_http.post(
        "/api/agents/tasks", json={"problem_type": "energy_crisis", "severity": "low", "description": "by hand"}
    )
    assert response.status_code == 201, response.text
    by_hand = response.json()["task_id"]
    await wait_task(redis_client, by_hand)

    await world.snapshot(avg_energy=5.0)  # still falling: shown (held back by the cooldown), the task stays
    assert (await watcher.analyze()).status == COOLDOWN
    await world.snapshot()  # energy back: one snapshot could be a lull
    assert (await watcher.analyze()).status == NO_ANOMALY
    assert crisis.task_id in await watcher_tasks(redis_client)
    await world.snapshot()  # the second in a row: the problem has cleared
    assert (await watcher.analyze()).status == NO_ANOMALY

    async def ended(task_id: str) -> TaskResult:
        handle = temporal_client.get_workflow_handle(task_workflow_id(task_id), result_type=TaskResult)
        return await asyncio.wait_for(handle.result(), 15)

    result = await ended(crisis.task_id)
    assert result.reason.value == "resolved", result
    # its workflow is found by its problem in the Temporal UI
    query = f'GenesisProblemType = "energy_crisis" AND WorkflowId = "{task_workflow_id(crisis.task_id)}"'
    deadline = time.monotonic() + 15
    while not [wf async for wf in temporal_client.list_workflows(query)]:
        assert time.monotonic() < deadline, f"no workflow for {query}"
        await asyncio.sleep(0.5)
    assert (
        result.detail
        == f"resolved by the Watcher: 2 snapshots in a row, the last at tick {world.tick}, no longer show energy_crisis"
    )
    [message] = await feed_messages(feed, "task_resolved", wait_s=1.0)
    assert message["task_id"] == crisis.task_id and message["problem_type"] == "energy_crisis"
    assert await redis_client.get(keys.agent_task(crisis.task_id)) is None
    assert await redis_client.get(keys.agent_task(by_hand)) is not None  # the operator's own stays open

    closed = await operator_http.post(f"/api/agents/tasks/{by_hand}/resolve", json={"reason": "energy is back"})
    assert closed.status_code == 202, closed.text
    result = await ended(by_hand)
    assert (
        result.detail is not None
        and result.detail.startswith("resolved by operator ")
        and result.detail.endswith(": energy is back")
    ), result
