"""The API's conventions on the real API process, Postgres, Redis and Temporal: the task list at
both of its paths; cursor paging walked across more than one page on every kind of list, with
changes in between; unknown query parameters named; JSON bodies without their Content-Type
refused with a clear 415; and the schedules' durations under the `_sec` convention."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from datetime import UTC, datetime, timedelta
from urllib.parse import parse_qsl, urlsplit

import httpx
import pytest
from sqlalchemy import delete, func, select, update
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from evolution import feed, tasks
from genesis import redis_keys as keys
from genesis.db.models import EvolutionCycle, Mutation
from genesis.db.session import get_sessionmaker
from genesis.dto import AgentTask, TaskClose, TaskEndReason, TaskSeverity
from tests import agents
from tests.units import duration_name_problem, json_keys

TASK = {"problem_type": "starvation", "severity": "low", "description": "paging and both paths"}


async def walk(
    http: httpx.AsyncClient, path: str, params: dict, items: str, replaces: tuple[str, ...] = ()
) -> list[list[dict]]:
    """Every page of a list, following next_cursor; the Link header names the same next page
    (this path, the other parameters kept, the cursor set in place of ``replaces``)."""
    pages, cursor = [], None
    while True:
        if cursor:
            params = {**{k: v for k, v in params.items() if k not in replaces}, "cursor": cursor}
        response = await http.get(path, params=params)
        assert response.status_code == 200, response.text
        body = response.json()
        pages.append(body[items])
        cursor = body["next_cursor"]
        link = response.headers.get("link")
        if cursor is None:
            assert link is None, link
            return pages
        assert link is not None and link.startswith("<") and link.endswith('>; rel="next"'), link
        target = urlsplit(link[1 : -len('>; rel="next"')])
        assert target.path == path and not target.netloc, link
        kept = {k: str(v) for k, v in params.items() if k not in replaces}
        assert dict(parse_qsl(target.query)) == {**kept, "cursor": cursor}, link
        assert len(pages) < 100, "the walk does not end"


def flat(pages: list[list[dict]], key: str) -> list:
    return [item[key] for page in pages for item in page]


# --- GET /api/agents/tasks -----------------------------------------------------------------------


async def test_the_task_list_answers_at_both_paths(http, operator_http):
    published = await operator_http.post("/api/agents/tasks", json=TASK)
    assert published.status_code == 201, published.text
    task_id = published.json()["task_id"]
    try:
        deadline = time.monotonic() + 15
        while task_id not in flat([(await http.get("/api/agents/context/tasks")).json()["tasks"]], "task_id"):
            assert time.monotonic() < deadline, "the TaskWorkflow never wrote the task"
            await asyncio.sleep(0.2)
        seed_path = await http.get("/api/agents/context/tasks", params={"limit": 500})
        agents_path = await http.get("/api/agents/tasks", params={"limit": 500})
        assert seed_path.status_code == agents_path.status_code == 200, agents_path.text
        assert set(agents_path.json()) == set(seed_path.json()) == {"tasks", "next_cursor"}
        for answer in (seed_path, agents_path):
            (mine,) = [t for t in answer.json()["tasks"] if t["task_id"] == task_id]
            assert mine["problem_type"] == "starvation" and mine["ttl_remaining_sec"] > 0
        same = [{k: v for k, v in t.items() if k != "ttl_remaining_sec"} for t in seed_path.json()["tasks"]]
        assert same == [{k: v for k, v in t.items() if k != "ttl_remaining_sec"} for t in agents_path.json()["tasks"]]
        assert (await http.post("/api/agents/tasks", json=TASK)).status_code == 401  # publishing is still an operator's
    finally:
        await operator_http.post(f"/api/agents/tasks/{task_id}/resolve", json={"reason": "test over"})


# --- Paging --------------------------------------------------------------------------------------


async def test_the_mutation_list_pages_without_duplicates_or_gaps(http, settings):
    agent = await agents.register(http, "pager", "walks the mutation list")
    proposed = []
    for n in range(7):
        body = {"trait_name": f"page_walk_{n}", "code": f"x = {n}\n"}  # rejected by the gatekeeper: fine here
        response = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
        assert response.status_code == 202, response.text
        proposed.append(response.json()["mutation_id"])
    newest_first = list(reversed(proposed))
    params = {"agent_id": agent.agent_id, "limit": 3}
    pages = await walk(http, "/api/mutations", params, "mutations")
    assert [len(page) for page in pages] == [3, 3, 1]
    assert flat(pages, "mutation_id") == newest_first

    # A mutation recorded during a walk comes in at the top, behind the walker: the rest of the walk
    # is the same as before, with nothing twice and nothing left out.
    first = (await http.get("/api/mutations", params=params)).json()
    late = await http.post(
        "/api/mutations/propose", json={"trait_name": "page_walk_late", "code": "y = 1\n"}, headers=agent.headers
    )
    assert late.status_code == 202
    rest = await walk(http, "/api/mutations", {**params, "cursor": first["next_cursor"]}, "mutations")
    assert flat([first["mutations"]], "mutation_id") + flat(rest, "mutation_id") == newest_first

    # Rows created in the same microsecond still page in a fixed order (the id breaks the tie).
    async with get_sessionmaker(settings.database_url)() as session:
        moment = await session.scalar(select(func.max(Mutation.created_at)).where(Mutation.mutation_id.in_(proposed)))
        await session.execute(update(Mutation).where(Mutation.mutation_id.in_(proposed)).values(created_at=moment))
        await session.commit()
    tied = flat(
        await walk(http, "/api/mutations", {"agent_id": agent.agent_id, "limit": 2}, "mutations"), "mutation_id"
    )
    assert tied[0] == late.json()["mutation_id"] and sorted(tied[1:], reverse=True) == tied[1:]
    assert sorted(tied[1:]) == sorted(proposed)


async def test_the_task_list_pages_through_equal_expiry_times(http, redis_client):
    expires_at = round(time.time() + 120, 3)  # one expiry time for all: the task id orders them
    ids = sorted(f"task_page_{uuid.uuid4().hex[:8]}" for _ in range(5))
    for task_id in ids:
        task = AgentTask(
            task_id=task_id,
            expires_at=expires_at,
            problem_type="starvation",
            severity=TaskSeverity.low,
            description="paging",
        )
        assert await tasks.publish(redis_client, task)
    try:
        pages = await walk(http, "/api/agents/tasks", {"limit": 2}, "tasks")
        walked = flat(pages, "task_id")
        assert len(walked) == len(set(walked)), walked  # nothing twice
        assert [t for t in walked if t in ids] == ids  # all of them, in id order
        expiries = [task["expires_at"] for page in pages for task in page]
        assert expiries == sorted(expiries)
        single = (await http.get("/api/agents/context/tasks", params={"limit": 500})).json()
        assert flat([single["tasks"]], "task_id") == walked and single["next_cursor"] is None
        # A task that ends during the walk is simply not there any more; the others all are.
        first = (await http.get("/api/agents/context/tasks", params={"limit": 2})).json()
        gone = next(t for t in walked[2:] if t in ids)
        await tasks.close(redis_client, TaskClose(task_id=gone, reason=TaskEndReason.resolved))
        rest = await walk(http, "/api/agents/context/tasks", {"limit": 2, "cursor": first["next_cursor"]}, "tasks")
        assert flat([first["tasks"]], "task_id") + flat(rest, "task_id") == [t for t in walked if t != gone]
    finally:
        for task_id in ids:
            await tasks.close(redis_client, TaskClose(task_id=task_id, reason=TaskEndReason.resolved))


async def test_the_cycle_list_pages_newest_first(http, settings):
    sessions = get_sessionmaker(settings.database_url)
    now = datetime.now(UTC) + timedelta(days=1)  # newer than every other cycle of the session
    made = [f"trg_page{n:02d}{uuid.uuid4().hex[:6]}" for n in range(5)]
    times = [now, now, now, now - timedelta(seconds=1), now - timedelta(seconds=2)]  # three at one moment
    async with sessions() as session:
        for trigger_id, created in zip(made, times, strict=True):
            session.add(
                EvolutionCycle(
                    trigger_id=trigger_id,
                    workflow_id=f"evolution-{trigger_id}",
                    kind="anomaly",
                    stage="completed",
                    status="succeeded",
                    created_at=created,
                    updated_at=created,
                )
            )
        await session.commit()
    try:
        pages = await walk(http, "/api/evolution/cycles", {"limit": 2}, "cycles")
        walked = flat(pages, "trigger_id")
        assert len(walked) == len(set(walked))
        expected = sorted(made[:3], reverse=True) + made[3:]  # equal times: the trigger id breaks the tie
        assert walked[:5] == expected
        single = (await http.get("/api/evolution/cycles", params={"limit": 500})).json()
        assert flat([single["cycles"]], "trigger_id") == walked
    finally:
        async with sessions() as session:
            await session.execute(delete(EvolutionCycle).where(EvolutionCycle.trigger_id.in_(made)))
            await session.commit()


async def test_the_feed_pages_forward(http, redis_client):
    start = (await http.get("/api/feed", params={"limit": 1})).json()["last_id"] or "0-0"
    marker = f"trg_feedpage{uuid.uuid4().hex[:6]}"
    published = [
        await feed.publish(redis_client, "test", "paging", f"message {n}", trigger_id=marker) for n in range(7)
    ]
    pages = await walk(http, "/api/feed", {"after": start, "limit": 3}, "messages", replaces=("after",))
    walked = flat(pages, "id")
    assert len(walked) == len(set(walked))
    assert [m["id"] for page in pages for m in page if m.get("trigger_id") == marker] == published
    assert walked == flat(
        [(await http.get("/api/feed", params={"after": start, "limit": 500})).json()["messages"]], "id"
    )
    both = await http.get("/api/feed", params={"after": start, "cursor": "x"})
    assert both.status_code == 422 and both.json()["errors"][0]["field"] == "query.cursor", both.text


async def test_the_entity_list_pages_by_id_while_the_world_changes(http, redis_client):
    saved_entities = await redis_client.get(keys.ENGINE_ENTITIES)
    saved_status = await redis_client.hgetall(keys.ENGINE_STATUS)

    async def world(ids: list[int]) -> None:
        entities = [
            {"id": i, "x": 1.0, "y": 2.0, "energy": 50.0, "max_energy": 100.0, "age": 1, "traits": [], "generation": 0}
            for i in ids
        ]
        await redis_client.set(keys.ENGINE_ENTITIES, json.dumps(entities))
        await redis_client.hset(
            keys.ENGINE_STATUS, mapping={"tick": "10", "population": str(len(ids)), "updated_at": str(time.time())}
        )

    try:
        await world([3, 5, 8, 13, 21, 34, 55])
        pages = await walk(http, "/api/world/entities", {"limit": 3}, "entities")
        assert [[e["id"] for e in page] for page in pages] == [[3, 5, 8], [13, 21, 34], [55]]
        first = (await http.get("/api/world/entities", params={"limit": 3})).json()
        await world([3, 5, 8, 21, 34, 55, 60])  # 13 died, 60 was born
        rest = await walk(http, "/api/world/entities", {"limit": 3, "cursor": first["next_cursor"]}, "entities")
        assert flat([first["entities"]], "id") + flat(rest, "id") == [3, 5, 8, 21, 34, 55, 60]
    finally:
        await redis_client.delete(keys.ENGINE_ENTITIES, keys.ENGINE_STATUS)
        if saved_entities is not None:
            await redis_client.set(keys.ENGINE_ENTITIES, saved_entities)
        if saved_status:
            await redis_client.hset(keys.ENGINE_STATUS, mapping=saved_status)


async def test_the_schedule_list_pages_by_id_and_says_interval_sec(http, operator_http):
    prefix = f"page-{uuid.uuid4().hex[:6]}"
    made = []
    try:
        for n, body in enumerate(({"interval_sec": 3600}, {"interval_s": 7200}, {"interval_sec": 600.5})):
            response = await operator_http.post(
                "/api/schedules", json={"schedule_id": f"{prefix}-{n}", "paused": True, **body}
            )
            assert response.status_code == 201, response.text
            made.append(response.json())
        # Durations end in their unit: interval_sec, with interval_s (its older name, still read) beside it.
        assert [(s["interval_sec"], s["interval_s"]) for s in made] == [(3600, 3600), (7200, 7200), (600.5, 600.5)]
        both = await operator_http.post("/api/schedules", json={"interval_sec": 3600, "interval_s": 3600})
        assert both.status_code == 422 and both.json()["errors"][0]["field"] == "interval_s", both.text
        deadline = time.monotonic() + 30
        while True:  # Temporal's list shows a new schedule after a moment
            pages = await walk(http, "/api/schedules", {"limit": 1}, "schedules")
            walked = flat(pages, "schedule_id")
            if [s for s in walked if s.startswith(prefix)] == [s["schedule_id"] for s in made]:
                break
            assert time.monotonic() < deadline, walked
            await asyncio.sleep(0.5)
        assert walked == sorted(walked) and len(walked) == len(set(walked)) and all(len(page) == 1 for page in pages)
    finally:
        for schedule in made:
            await operator_http.delete(f"/api/schedules/{schedule['schedule_id']}")


@pytest.mark.parametrize(
    "path, cursor_of",
    [("/api/mutations", "/api/agents/tasks"), ("/api/traits", "/api/mutations")],
    ids=["task-cursor-on-mutations", "mutation-cursor-on-traits"],
)
async def test_a_cursor_of_another_list_or_an_edited_one_is_a_422(http, redis_client, path, cursor_of):
    made = [
        AgentTask(
            task_id=f"task_cur_{uuid.uuid4().hex[:6]}",
            expires_at=round(time.time() + 60, 3),
            problem_type="starvation",
            severity=TaskSeverity.low,
            description="cursor",
        )
        for _ in range(2)
    ]
    for task in made:
        await tasks.publish(redis_client, task)
    agent = await agents.agent(http, "cursor-maker")
    for n in range(2):
        await http.post(
            "/api/mutations/propose", json={"trait_name": f"cursor_{n}", "code": "z = 1\n"}, headers=agent.headers
        )
    try:
        cursor = (await http.get(cursor_of, params={"limit": 1})).json()["next_cursor"]
        assert cursor, "the other list has one page only"
        for bad in (cursor, cursor[:-2], "%%%", "x" * 600):
            response = await http.get(path, params={"cursor": bad})
            assert response.status_code == 422, (bad, response.text)
            assert response.json()["errors"][0]["field"] == "query.cursor", response.text
        assert "another list" in (await http.get(path, params={"cursor": cursor})).json()["detail"]
    finally:
        for task in made:
            await tasks.close(redis_client, TaskClose(task_id=task.task_id, reason=TaskEndReason.resolved))


# --- Unknown query parameters --------------------------------------------------------------------


async def test_an_unknown_query_parameter_is_named_with_the_accepted_ones(http, settings):
    response = await http.get("/api/mutations", params={"limt": 5})
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "VALIDATION_ERROR"
    assert body["errors"] == [
        {
            "field": "query.limt",
            "message": "unknown query parameter; this endpoint accepts agent_id, cursor, limit, status, trait_name",
        }
    ]
    assert body["accepted_parameters"] == ["agent_id", "cursor", "limit", "status", "trait_name"]
    assert body["detail"].startswith("query.limt: unknown query parameter")

    none = await http.get("/api/stats", params={"verbose": "1"})
    assert none.status_code == 422 and "takes no query parameters" in none.json()["detail"], none.text

    # On a write nothing is recorded: the parameter is refused before the route runs.
    agent = await agents.agent(http, "strict-params")
    async with get_sessionmaker(settings.database_url)() as session:
        before = await session.scalar(select(func.count()).select_from(Mutation))
    write = await http.post(
        "/api/mutations/propose?dry_run=1", json={"trait_name": "strict_p", "code": "a = 1\n"}, headers=agent.headers
    )
    assert write.status_code == 422 and write.json()["errors"][0]["field"] == "query.dry_run", write.text
    async with get_sessionmaker(settings.database_url)() as session:
        assert await session.scalar(select(func.count()).select_from(Mutation)) == before

    # A declared alias is a known name (POST /execute_step?async=true), and its body is judged as usual.
    aliased = await http.post("/execute_step?async=true", json={}, headers=agent.headers)
    assert aliased.status_code == 422 and all(e["field"] != "query.async" for e in aliased.json()["errors"])


async def test_pages_outside_the_api_take_any_parameter(http):
    for path in ("/docs?urls.primaryName=x", "/redoc?x=1", "/?panel=traits", "/metrics?name[]=x", "/openapi.json?v=2"):
        response = await http.get(path)
        assert response.status_code == 200, (path, response.text[:200])


async def test_a_websocket_with_an_unknown_parameter_gets_an_error_frame_and_1008(api_url):
    ws_url = api_url.replace("http://", "ws://")
    for path, accepted in (
        ("/api/agents/telemetry?evnts=TaskPublished", ["events"]),
        ("/ws/feed?from=0-0", ["after"]),
        ("/ws/world?fps=60", []),
    ):
        async with connect(ws_url + path) as socket:
            frame = json.loads(await asyncio.wait_for(socket.recv(), 5))
            assert frame["event"] == "Error" and frame["error"] == "VALIDATION_ERROR", frame
            assert frame["accepted_parameters"] == accepted and frame["errors"][0]["field"].startswith("query."), frame
            with pytest.raises(ConnectionClosed) as closed:
                await asyncio.wait_for(socket.recv(), 5)
            assert closed.value.rcvd.code == 1008 and closed.value.rcvd.reason == "VALIDATION_ERROR"
    async with connect(ws_url + "/api/agents/telemetry?events=TaskPublished") as socket:  # a declared one
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(socket.recv(), 0.5)


# --- Content-Type --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "content_type, says",
    [
        (None, "the request has no Content-Type header"),
        ("application/x-www-form-urlencoded", "what curl -d sends unless given -H 'Content-Type: application/json'"),
        ("text/plain", "the request says Content-Type: text/plain"),
    ],
    ids=["none", "form", "text"],
)
async def test_a_json_body_without_its_content_type_is_a_clear_415(http, settings, content_type, says):
    agent = await agents.agent(http, "content-type")
    body = json.dumps({"trait_name": "no_content_type", "code": "b = 1\n"}).encode()
    headers = {**agent.headers, **({"Content-Type": content_type} if content_type else {})}
    async with get_sessionmaker(settings.database_url)() as session:
        before = await session.scalar(select(func.count()).select_from(Mutation))
    response = await http.post("/api/mutations/propose", content=body, headers=headers)
    assert response.status_code == 415, response.text
    assert response.json()["error"] == "UNSUPPORTED_MEDIA_TYPE"
    assert "send it with the header Content-Type: application/json" in response.json()["detail"]
    assert says in response.json()["detail"]
    async with get_sessionmaker(settings.database_url)() as session:
        assert await session.scalar(select(func.count()).select_from(Mutation)) == before
    register = await http.post(
        "/v1/agents/register", content=b'{"name": "x"}', headers={"Content-Type": content_type or ""}
    )
    assert register.status_code == 415, register.text


async def test_json_content_types_and_empty_bodies_pass(http, redis_client):
    registered = await http.post(
        "/v1/agents/register",
        content=b'{"name": "charset"}',
        headers={"Content-Type": "application/json; charset=utf-8"},
    )
    assert registered.status_code == 201, registered.text
    key = {"X-API-Key": registered.json()["api_key"]}
    task = AgentTask(
        task_id=f"task_ct_{uuid.uuid4().hex[:6]}",
        expires_at=round(time.time() + 60, 3),
        problem_type="starvation",
        severity=TaskSeverity.low,
        description="claim without a body",
    )
    await tasks.publish(redis_client, task)
    try:  # a claim needs no body: no body, no Content-Type, no 415
        claim = await http.post(f"/api/agents/tasks/{task.task_id}/claim", headers=key)
        assert claim.status_code == 201, claim.text
    finally:
        await tasks.close(redis_client, TaskClose(task_id=task.task_id, reason=TaskEndReason.resolved))


# --- Units ---------------------------------------------------------------------------------------


async def test_durations_in_live_answers_end_in_their_unit(http, redis_client):
    """The answers without a response model in the schema (the unit test reads the schema's), as
    a running API gives them: each key that measures time is named by its unit."""
    saved_status = await redis_client.hgetall(keys.ENGINE_STATUS)
    await redis_client.hset(
        keys.ENGINE_STATUS,
        mapping={"tick": "10", "population": "5", "updated_at": str(time.time()), "mean_tick_ms": "1.5"},
    )
    try:
        answers = {}
        for path in (
            "/api/health",
            "/api/stats",
            "/api/world/state",
            "/api/agents/telemetry/status",
            "/api/viewer/config",
            "/api/agents/context/sandbox-api",
        ):
            response = await http.get(path)
            assert response.status_code in (200, 503), (path, response.text)
            answers[path] = response.json()
        assert "latency_ms" in answers["/api/health"]["dependencies"]["redis"]
        assert answers["/api/stats"]["mean_tick_ms"] == 1.5
        keys_seen = json_keys(answers)
        assert [problem for key in sorted(keys_seen) if (problem := duration_name_problem(key))] == []
    finally:
        await redis_client.delete(keys.ENGINE_STATUS)
        if saved_status:
            await redis_client.hset(keys.ENGINE_STATUS, mapping=saved_status)
