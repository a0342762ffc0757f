"""WS /api/agents/telemetry over real Redis, a real API process, the real mutation pipeline and a
real engine: every event type arrives, filters are validated, a slow client is closed without
holding the others up, and the stream survives its Redis connection being killed and Redis
itself restarting.

Redis pub/sub is server-wide (not per database) and other test runs may share the server, so
every assertion looks for events this test produced (its task ids, its mutation ids)."""

from __future__ import annotations

import asyncio
import json
import secrets
import shutil
import socket
import subprocess
import time
import uuid

import httpx
import pytest
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from cli.processes import free_port
from genesis.redis_keys import Channels, world_snapshot
from tests import agents, traits
from tests.pipeline_steps import propose, wait_for_status


def ws_url(api_url: str, query: str = "") -> str:
    return api_url.replace("http://", "ws://") + "/api/agents/telemetry" + (f"?{query}" if query else "")


async def next_event(ws, match, timeout_s: float = 30) -> dict:
    """The next event on ``ws`` for which ``match(event)`` holds (others are skipped)."""
    deadline = time.monotonic() + timeout_s
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise AssertionError("no matching telemetry event in time")
        event = json.loads(await asyncio.wait_for(ws.recv(), remaining))
        if match(event):
            return event


def task_event(kind: str, task_id: str, **fields) -> str:
    return json.dumps({"event": kind, "task_id": task_id, **fields})


async def hub_status(api_url: str) -> dict:
    async with httpx.AsyncClient(base_url=api_url, timeout=10) as client:
        response = await client.get("/api/agents/telemetry/status")
        assert response.status_code == 200, response.text
        return response.json()


async def wait_subscribed(api_url: str, min_connects: int = 1, timeout_s: float = 30) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        status = await hub_status(api_url)
        if status["subscribed"] and status["connects"] >= min_connects:
            return status
        assert time.monotonic() < deadline, f"the telemetry hub did not (re)subscribe: {status}"
        await asyncio.sleep(0.1)


async def test_task_events_are_forwarded_and_filtered(api_url, redis_client):
    await wait_subscribed(api_url)
    task_id = f"task_{uuid.uuid4().hex[:8]}"
    mine = lambda e: e.get("task_id") == task_id  # noqa: E731
    async with connect(ws_url(api_url)) as everything, connect(ws_url(api_url, "events=TaskExpired")) as expired_only:
        await redis_client.publish(Channels.AGENT_TASKS, "not json")  # ignored, never forwarded
        await redis_client.publish(Channels.AGENT_TASKS, json.dumps({"event": "MutationActivated"}))  # wrong channel
        await redis_client.publish(
            Channels.AGENT_TASKS,
            task_event("TaskPublished", task_id, problem_type="overpopulation", expires_at=1708124500.0),
        )
        await redis_client.publish(Channels.AGENT_TASKS, task_event("TaskExpired", task_id))

        published = await next_event(everything, mine)
        assert published == {
            "event": "TaskPublished",
            "task_id": task_id,
            "problem_type": "overpopulation",
            "expires_at": 1708124500.0,
        }
        assert await next_event(everything, mine) == {"event": "TaskExpired", "task_id": task_id}
        # The filtered socket never sees TaskPublished: its first event of this task is the expiry.
        assert await next_event(expired_only, mine) == {"event": "TaskExpired", "task_id": task_id}
    status = await hub_status(api_url)
    assert status["ignored"] >= 2 and status["events"] >= 2


async def test_tasks_published_and_closed_through_their_workflow(api_url, http, operator_http):
    """The real path: an operator task's TaskWorkflow publishes TaskPublished, and resolving it
    announces TaskClosed."""
    async with connect(ws_url(api_url, "events=TaskPublished,TaskClosed")) as ws:
        response = await operator_http.post(
            "/api/agents/tasks",
            json={"problem_type": "overpopulation", "severity": "low", "description": "telemetry stream test"},
        )
        assert response.status_code == 201, response.text
        task = response.json()
        mine = lambda e: e.get("task_id") == task["task_id"]  # noqa: E731
        published = await next_event(ws, mine)
        assert published["event"] == "TaskPublished" and published["problem_type"] == "overpopulation"
        assert published["expires_at"] == pytest.approx(task["expires_at"])
        response = await operator_http.post(
            f"/api/agents/tasks/{task['task_id']}/resolve", json={"reason": "stream test"}
        )
        assert response.status_code == 202, response.text
        closed = await next_event(ws, mine)
        assert closed["event"] == "TaskClosed"


@pytest.mark.parametrize(
    "query, problem",
    [
        ("events=Bogus", "unknown event type(s) 'Bogus'"),
        ("events=TaskPublished,Nope", "unknown event type(s) 'Nope'"),
        ("events=", "events is empty"),
    ],
)
async def test_an_invalid_filter_is_refused_with_a_clear_error(api_url, query, problem):
    async with connect(ws_url(api_url, query)) as ws:
        error = json.loads(await asyncio.wait_for(ws.recv(), 10))
        assert error["event"] == "Error" and error["error"] == "INVALID_EVENT_FILTER"
        assert problem in error["detail"] and "WorldSnapshot" in error["detail"]  # names the valid ones
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 10)
    assert closed.value.rcvd.code == 1008 and closed.value.rcvd.reason == "INVALID_EVENT_FILTER"


async def test_stream_survives_its_redis_connection_being_killed(api_url, redis_client):
    before = await wait_subscribed(api_url)
    async with connect(ws_url(api_url, "events=TaskPublished")) as ws:
        # Kill exactly this API process's subscription (CLIENT KILL by id: safe for other runs).
        clients = await redis_client.client_list()
        [hub] = [c for c in clients if c.get("name") == before["connection_name"]]
        assert await redis_client.execute_command("CLIENT", "KILL", "ID", hub["id"]) == 1
        status = await wait_subscribed(api_url, min_connects=before["connects"] + 1)
        assert status["connection_errors"] > before["connection_errors"]
        task_id = f"task_{uuid.uuid4().hex[:8]}"
        await redis_client.publish(
            Channels.AGENT_TASKS, task_event("TaskPublished", task_id, problem_type="x", expires_at=1.0)
        )
        event = await next_event(ws, lambda e: e.get("task_id") == task_id)  # the same socket, still open
        assert event["event"] == "TaskPublished"


async def test_stream_survives_a_redis_restart(start_api, tmp_path):
    """A Redis server of this test's own (so restarting it disturbs no one) is killed and
    started again on the same port; the client's socket stays open and events flow again."""
    redis_server = shutil.which("redis-server")
    assert redis_server, "redis-server is not installed"
    port = free_port()
    argv = [
        redis_server,
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        str(tmp_path),
    ]

    def start_redis() -> subprocess.Popen:
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    async def publish_until_received(ws, task_id: str) -> dict:
        client = aioredis.from_url(f"redis://127.0.0.1:{port}/0")
        try:
            deadline = time.monotonic() + 30
            while True:  # the hub may not be subscribed yet: publish until it hears one
                try:
                    await client.publish(
                        Channels.AGENT_TASKS, task_event("TaskPublished", task_id, problem_type="x", expires_at=1.0)
                    )
                    return await next_event(ws, lambda e: e.get("task_id") == task_id, timeout_s=0.5)
                except (TimeoutError, AssertionError, OSError, RedisError):
                    assert time.monotonic() < deadline, "no event after the Redis restart"
        finally:
            await client.aclose()

    server = start_redis()
    try:
        api_url = await start_api(
            "api-own-redis", redis_url=f"redis://127.0.0.1:{port}/0", telemetry_reconnect_max_s=0.5
        )
        await wait_subscribed(api_url)
        async with connect(ws_url(api_url)) as ws:
            assert (await publish_until_received(ws, "task_before"))["task_id"] == "task_before"
            server.kill()
            server.wait(10)
            deadline = time.monotonic() + 30
            while (await hub_status(api_url))["subscribed"]:
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.5)  # the hub retries against a dead server for a while, no crash
            assert (await hub_status(api_url))["connection_errors"] >= 1
            server = start_redis()
            await wait_subscribed(api_url, min_connects=2)
            assert (await publish_until_received(ws, "task_after"))["task_id"] == "task_after"
    finally:
        server.kill()
        server.wait(10)


async def test_a_slow_client_is_closed_and_does_not_hold_up_the_others(start_api, settings, redis_client):
    queue = 64
    api_url = await start_api("api-small-queue", telemetry_client_queue=queue)
    await wait_subscribed(api_url)
    run = uuid.uuid4().hex[:8]
    total = 3000  # ~12 MB of incompressible padding (frames are deflated): more than the socket
    # buffers between the API and a client that stops reading
    # The slow client's library stops reading from its socket once 1 message is waiting, and its
    # socket's receive buffer is small and fixed (no autotuning to tens of MB on loopback).
    host, port = api_url.removeprefix("http://").split(":")
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.connect((host, int(port)))
    sock.setblocking(False)
    async with (
        connect(ws_url(api_url, "events=TaskExpired"), sock=sock, max_queue=1) as slow,
        connect(ws_url(api_url, "events=TaskExpired"), max_size=None) as fast,
    ):

        async def slow_client_is_told() -> ConnectionClosed:
            """Once the API has given up on the slow client, read what was in flight, then the close."""
            while (await hub_status(api_url))["slow_consumers_closed"] == 0:
                await asyncio.sleep(0.2)
            try:
                while True:
                    await asyncio.wait_for(slow.recv(), 10)
            except ConnectionClosed as closed:
                return closed

        told = asyncio.create_task(slow_client_is_told())
        received = 0
        sent = 0
        while sent < total:
            # Publish in small bursts and let the fast client keep up (it reads everything).
            async with redis_client.pipeline(transaction=False) as pipe:
                for _ in range(16):
                    pipe.publish(
                        Channels.AGENT_TASKS,
                        task_event("TaskExpired", f"task_{run}_{sent}", pad=secrets.token_hex(2048)),
                    )
                    sent += 1
                await pipe.execute()
            while received < sent - (16 if sent < total else 0):
                event = await next_event(fast, lambda e: e["task_id"].startswith(f"task_{run}_"), timeout_s=10)
                assert event["task_id"] == f"task_{run}_{received}"  # in order, nothing skipped
                received += 1
        closed = await asyncio.wait_for(told, 60)
        assert closed.rcvd is not None and closed.rcvd.code == 1013
        assert closed.rcvd.reason.startswith("SLOW_CONSUMER")
    status = await hub_status(api_url)
    assert status["slow_consumers_closed"] == 1


async def test_world_snapshots_from_the_engine(api_url, redis_client, engine_proc):
    async with connect(ws_url(api_url, "events=WorldSnapshot")) as ws:
        event = await next_event(ws, lambda e: True, timeout_s=60)
    assert event["event"] == "WorldSnapshot"
    stored = await redis_client.hgetall(world_snapshot(event["tick"]))
    assert stored, "the snapshot the event was resolved from"
    assert event["entity_count"] == int(stored[b"entity_count"])
    assert event["avg_energy"] == float(stored[b"avg_energy"])
    assert event["run_id"] == stored[b"run_id"].decode()
    for field in (
        "timestamp",
        "births_last_period",
        "deaths_last_period",
        "death_starvation",
        "death_age",
        "death_collision",
        "resource_density",
        "trait_diversity",
        "dominant_trait",
        "temperature",
        "trait_usage",
    ):
        assert field in event, field


async def test_activation_and_rollback_through_the_pipeline(api_url, http, engine_proc):
    agent = await agents.agent(http, "telemetry-watcher")
    async with connect(ws_url(api_url, "events=MutationActivated,MutationRolledBack")) as ws:
        mutation_id = await propose(
            http,
            traits.seeker(9100 + uuid.uuid4().int % 800),
            trait_name="telemetry_seeker",
            agent_id="telemetry-watcher",
        )
        mine = lambda e: e.get("mutation_id") == mutation_id  # noqa: E731
        activated = await next_event(ws, mine, timeout_s=120)
        assert activated["event"] == "MutationActivated" and activated["trait_name"] == "telemetry_seeker"
        assert activated["version"] >= 1
        await wait_for_status(http, mutation_id, {"activated", "kept", "rolled_back"})
        response = await http.post(
            f"/api/mutations/{mutation_id}/rollback", json={"reason": "stream test"}, headers=agent.headers
        )
        assert response.status_code in (200, 202), response.text
        rolled_back = await next_event(ws, mine, timeout_s=120)
    assert rolled_back["event"] == "MutationRolledBack" and rolled_back["trait_name"] == "telemetry_seeker"
    assert rolled_back["reason"] in ("stream test", "population_decline", "negative_fitness")
    assert "fitness_delta" in rolled_back
