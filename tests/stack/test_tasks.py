"""Tasks for external agents over HTTP, on the real API, worker, Temporal and Redis: publish
(operator endpoint), list, resolve, claims (one winner of 20), claims gating proposals, and a
task ending when the mutation proposed for it is activated."""

from __future__ import annotations

import asyncio
import json
import os
import time
import uuid

import pytest

from evolution import tasks
from genesis import redis_keys as keys
from genesis.dto import AgentTask, TaskClose, TaskEndReason, TaskResult, TaskSeverity
from genesis.redis_keys import Channels
from genesis.workflow_api import task_workflow_id
from tests import agents, traits
from tests.pipeline_steps import HISTORIES, propose, wait_for_verdict
from tests.replays import assert_replays
from tests.task_board import VALID, listed, publish, wait_listed
from workflows.mutation import MutationWorkflow
from workflows.task import TaskWorkflow

SEED_TASK_FIELDS = {
    "task_id",
    "expires_at",
    "ttl_remaining_sec",
    "source",
    "problem_type",
    "severity",
    "description",
    "suggested_area",
    "world_context",
    "constraints",
}


@pytest.fixture
async def task_events(redis_client):
    pubsub = redis_client.pubsub()
    await pubsub.subscribe(Channels.AGENT_TASKS)
    yield pubsub
    await pubsub.aclose()


async def next_event(pubsub, task_id: str, event: str, timeout_s: float = 15) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=0.5)
        if message:
            payload = json.loads(message["data"])
            if payload.get("task_id") == task_id and payload["event"] == event:
                return payload
    raise AssertionError(f"no {event} for {task_id} within {timeout_s}s")


async def task_result(temporal_client, task_id: str) -> TaskResult:
    handle = temporal_client.get_workflow_handle(task_workflow_id(task_id), result_type=TaskResult)
    return await asyncio.wait_for(handle.result(), 30)


async def test_published_task_is_listed_in_the_seed_shape(http, redis_client, task_events, settings, operator_http):
    before = time.time()
    response = await operator_http.post(
        "/api/agents/tasks", json={**VALID, "world_context": {"entity_count": 134, "avg_energy": 20.1}}
    )
    assert response.status_code == 201, response.text
    created = response.json()
    task_id = created["task_id"]
    assert task_id.startswith("task_") and created["workflow_id"] == f"task-{task_id}"
    assert before + 600 <= created["expires_at"] <= time.time() + 600  # high: 10 minutes

    event = await next_event(task_events, task_id, "TaskPublished")
    assert event == {
        "event": "TaskPublished",
        "task_id": task_id,
        "problem_type": "starvation",
        "expires_at": created["expires_at"],
    }
    task = await wait_listed(http, task_id)
    assert set(task) >= SEED_TASK_FIELDS
    assert task["source"] == "operator" and task["severity"] == "high" and task["suggested_area"] == "traits"
    assert task["world_context"] == {"entity_count": 134, "avg_energy": 20.1}
    assert list(task["constraints"]) == list(tasks.TASK_CONSTRAINTS)
    assert 590 <= task["ttl_remaining_sec"] <= 600 and task["claimed_by"] is None

    # Redis as the seed describes it: the body with a TTL, the queue scored by expires_at.
    assert await redis_client.zscore(keys.AGENT_TASKS_QUEUE, task_id) == pytest.approx(created["expires_at"])
    assert 590_000 < await redis_client.pttl(keys.agent_task(task_id)) <= 600_000
    assert AgentTask.model_validate_json(await redis_client.get(keys.agent_task(task_id))).task_id == task_id


@pytest.mark.parametrize(
    "severity, ttl_s", [("critical", 900), ("high", 600), ("low", 300), ("periodic_improvement", 300)]
)
async def test_ttl_follows_severity(http, severity, ttl_s, operator_http):
    created = await publish(operator_http, severity=severity, task_id=f"task_ttl_{severity}_{uuid.uuid4().hex[:6]}")
    assert created["expires_at"] - time.time() == pytest.approx(ttl_s, abs=3)
    assert created["ttl_remaining_sec"] == pytest.approx(ttl_s, abs=3)


@pytest.mark.parametrize(
    "change, field, needle",
    [
        ({"problem_type": None}, "problem_type", "valid string"),
        ({"problem_type": "Starvation!"}, "problem_type", "pattern"),
        ({"severity": "medium"}, "severity", "'critical', 'high', 'low' or 'periodic_improvement'"),
        ({"severity": 3}, "severity", "'critical'"),
        ({"description": ""}, "description", "at least 1 character"),
        ({"description": "   "}, "description", "blank"),
        ({"description": "x" * 2001}, "description", "at most 2000"),
        ({"task_id": "bad id!"}, "task_id", "task_id must be"),
        ({"suggested_area": "core"}, "suggested_area", "'traits', 'physics' or 'environment'"),
        ({"world_context": {"nested": {"a": 1}}}, "world_context", "numbers, strings, booleans or null ('nested'"),
        ({"world_context": [1, 2]}, "world_context", "valid dictionary"),
        ({"constraints": ["ok"] * 21}, "constraints", "at most 20"),
        ({"constraints": [""]}, "constraints.0", "at least 1 character"),
        ({"source": "Operator Bob"}, "source", "pattern"),
        ({"ttl_sec": 5}, "ttl_sec", "unknown field"),
    ],
)
async def test_invalid_task_fields_are_named(http, change, field, needle, operator_http):
    body = {**VALID, **change}
    response = await operator_http.post("/api/agents/tasks", json=body)
    assert response.status_code == 422, response.text
    payload = response.json()
    assert payload["error"] == "VALIDATION_ERROR"
    assert [e["field"] for e in payload["errors"]] == [field], payload
    assert needle in payload["errors"][0]["message"], payload


async def test_non_finite_numbers_are_refused(http, operator_http):
    body = b'{"problem_type": "p", "severity": "low", "description": "d", "world_context": {"x": NaN}}'
    response = await operator_http.post("/api/agents/tasks", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 422 and "finite" in response.json()["detail"], response.text


async def test_missing_fields_and_bad_bodies(http, operator_http):
    response = await operator_http.post("/api/agents/tasks", json={})
    assert response.status_code == 422
    assert {e["field"] for e in response.json()["errors"]} == {"problem_type", "severity", "description"}
    response = await operator_http.post(
        "/api/agents/tasks", content=b"[1]", headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 422 and response.json()["error"] == "INVALID_BODY"
    response = await operator_http.post("/api/agents/tasks", content=b"{", headers={"Content-Type": "application/json"})
    assert response.status_code == 400 and response.json()["error"] == "INVALID_JSON"


async def test_a_task_id_names_one_task(http, operator_http):
    task_id = f"task_dup_{uuid.uuid4().hex[:8]}"
    await publish(operator_http, task_id=task_id)
    response = await operator_http.post("/api/agents/tasks", json={**VALID, "task_id": task_id})
    assert response.status_code == 409 and response.json()["error"] == "TASK_EXISTS", response.text


async def test_expired_or_orphaned_entries_are_never_listed(http, redis_client):
    """Leftovers a dead worker could leave: a queue entry whose score has passed (with a body
    still present) and one whose body is gone. Neither is listed, neither can be claimed."""
    stale = AgentTask(
        task_id=f"task_stale_{uuid.uuid4().hex[:6]}",
        expires_at=time.time() - 5,
        problem_type="p",
        severity=TaskSeverity.low,
        description="d",
    )
    orphan = f"task_orphan_{uuid.uuid4().hex[:6]}"
    garbled = f"task_garbled_{uuid.uuid4().hex[:6]}"
    await redis_client.set(keys.agent_task(stale.task_id), stale.model_dump_json(), ex=60)
    await redis_client.set(keys.agent_task(garbled), "{not json", ex=60)
    await redis_client.zadd(
        keys.AGENT_TASKS_QUEUE, {stale.task_id: stale.expires_at, orphan: time.time() + 60, garbled: time.time() + 60}
    )
    try:
        tasks_now = await listed(http)
        assert stale.task_id not in tasks_now and orphan not in tasks_now and garbled not in tasks_now
        assert all(t["expires_at"] > time.time() - 1 for t in tasks_now.values())
        me = await agents.agent(http)
        for task_id in (stale.task_id, orphan):
            response = await http.post(f"/api/agents/tasks/{task_id}/claim", headers=me.headers)
            assert response.status_code == 404 and response.json()["error"] == "TASK_NOT_FOUND", response.text
    finally:
        await redis_client.zrem(keys.AGENT_TASKS_QUEUE, stale.task_id, orphan, garbled)
        await redis_client.delete(keys.agent_task(stale.task_id), keys.agent_task(garbled))


async def test_resolve_ends_the_task(http, temporal_client, task_events, redis_client, operator_http):
    task_id = (await publish(operator_http))["task_id"]
    response = await operator_http.post(f"/api/agents/tasks/{task_id}/resolve", json={"reason": "energy recovered"})
    assert response.status_code == 202, response.text
    event = await next_event(task_events, task_id, "TaskClosed")
    detail = event.pop("detail")
    assert event == {"event": "TaskClosed", "task_id": task_id, "reason": "resolved", "mutation_id": None}
    assert detail.startswith("resolved by operator ") and detail.endswith(": energy recovered"), detail
    await wait_listed(http, task_id, present=False)
    result = await task_result(temporal_client, task_id)
    assert result.reason == TaskEndReason.resolved and result.detail == detail
    assert await redis_client.exists(keys.agent_task(task_id)) == 0
    response = await operator_http.post(f"/api/agents/tasks/{task_id}/resolve")
    assert response.status_code == 404 and response.json()["error"] == "TASK_NOT_FOUND"
    # The finished run replays against the current workflow code.
    history = await temporal_client.get_workflow_handle(task_workflow_id(task_id)).fetch_history()
    await assert_replays(history, [TaskWorkflow])
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        with open(os.path.join(HISTORIES, "task_resolved.json"), "w") as f:
            f.write(history.to_json())


async def test_twenty_concurrent_claims_have_one_winner(http, settings, operator_http):
    task_id = (await publish(operator_http))["task_id"]
    racers = [await agents.register(http, f"racer-{i:02d}") for i in range(20)]
    responses = await asyncio.gather(
        *(http.post(f"/api/agents/tasks/{task_id}/claim", headers=racer.headers) for racer in racers)
    )
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 19, [r.text for r in responses]
    winner = next(r.json() for r in responses if r.status_code == 201)
    assert winner["task_id"] == task_id and winner["status"] == "claimed"
    assert winner["agent_id"] in {racer.agent_id for racer in racers}
    assert winner["lease_sec"] == pytest.approx(settings.task.claim_lease_s, abs=2)
    for lost in (r for r in responses if r.status_code == 409):
        payload = lost.json()
        assert payload["error"] == "TASK_ALREADY_CLAIMED"
        assert winner["agent_id"] in payload["detail"] and "lease" in payload["detail"]
        assert int(lost.headers["Retry-After"]) >= 1

    task = await wait_listed(http, task_id)
    assert task["claimed_by"] == winner["agent_id"]
    assert 0 < task["claim_lease_remaining_sec"] <= settings.task.claim_lease_s
    holder = next(racer for racer in racers if racer.agent_id == winner["agent_id"])
    again = await http.post(
        f"/api/agents/tasks/{task_id}/claim", json={"agent_id": holder.agent_id}, headers=holder.headers
    )
    assert again.status_code == 200 and again.json()["agent_id"] == winner["agent_id"]


async def test_claim_errors(http, operator_http):
    me = await agents.agent(http)
    response = await http.post("/api/agents/tasks/task_nope/claim", headers=me.headers)
    assert response.status_code == 404 and response.json()["error"] == "TASK_NOT_FOUND"
    task_id = (await publish(operator_http))["task_id"]
    response = await http.post(f"/api/agents/tasks/{task_id}/claim")
    assert response.status_code == 401 and response.json()["error"] == "API_KEY_REQUIRED", response.text
    response = await http.post(
        f"/api/agents/tasks/{task_id}/claim", json={"agent_id": "someone-else"}, headers=me.headers
    )
    assert response.status_code == 403 and response.json()["error"] == "AGENT_ID_MISMATCH", response.text
    for body, field in (({"agent_id": "no spaces"}, "agent_id"), ({"x": 1}, "x")):
        response = await http.post(f"/api/agents/tasks/{task_id}/claim", json=body, headers=me.headers)
        assert response.status_code == 422 and response.json()["errors"][0]["field"] == field, response.text


async def test_a_claim_is_a_lease(settings, redis_client):
    """On the real Redis scripts: a claim lapses after its lease; it never outlives its task."""
    task = AgentTask(
        task_id=f"task_lease_{uuid.uuid4().hex[:6]}",
        expires_at=time.time() + 60,
        problem_type="p",
        severity=TaskSeverity.low,
        description="d",
    )
    assert await tasks.publish(redis_client, task)
    first = await tasks.claim(redis_client, task.task_id, "agent-a", lease_s=0.3)
    assert first.code == tasks.CLAIM_WON and first.lease_remaining_s == pytest.approx(0.3)
    assert first.task_expires_at == pytest.approx(task.expires_at)
    assert (await tasks.claim(redis_client, task.task_id, "agent-b", lease_s=0.3)).code == tasks.CLAIM_TAKEN
    await asyncio.sleep(0.5)  # no mutation followed: the lease lapsed
    second = await tasks.claim(redis_client, task.task_id, "agent-b", lease_s=120)
    assert second.code == tasks.CLAIM_WON and second.holder == "agent-b"
    # The claimant's proposal renews the lease; anyone else's is refused.
    assert (
        await tasks.check_proposal(redis_client, task.task_id, "agent-a", 120)
    ).code == tasks.PROPOSAL_CLAIMED_BY_OTHER
    renewed = await tasks.check_proposal(redis_client, task.task_id, "agent-b", 30)
    assert renewed.code == tasks.PROPOSAL_BY_CLAIMANT and renewed.lease_remaining_s == pytest.approx(30, abs=0.1)
    assert await tasks.close(redis_client, TaskClose(task_id=task.task_id, reason=TaskEndReason.resolved))
    assert await redis_client.exists(keys.agent_task_claim(task.task_id)) == 0

    short = AgentTask(
        task_id=f"task_short_{uuid.uuid4().hex[:6]}",
        expires_at=time.time() + 2,
        problem_type="p",
        severity=TaskSeverity.low,
        description="d",
    )
    assert await tasks.publish(redis_client, short)
    capped = await tasks.claim(redis_client, short.task_id, "agent-a", lease_s=120)
    assert capped.code == tasks.CLAIM_WON and capped.lease_remaining_s <= 2
    await tasks.close(redis_client, TaskClose(task_id=short.task_id, reason=TaskEndReason.expired))


async def test_claimed_task_gates_proposals_and_ends_when_the_mutation_is_activated(
    http, temporal_client, task_events, redis_client, settings, operator_http
):
    task_id = (await publish(operator_http, problem_type="energy_crisis"))["task_id"]
    claimant_name = f"claimant-{uuid.uuid4().hex[:6]}"
    claimant, other = await agents.agent(http, claimant_name), await agents.register(http, "other")
    response = await http.post(f"/api/agents/tasks/{task_id}/claim", headers=claimant.headers)
    assert response.status_code == 201, response.text
    code = traits.seeker(uuid.uuid4().int % 100_000 + 1000)

    refused = await http.post(
        "/api/mutations/propose",
        headers=other.headers,
        json={
            "task_id": task_id,
            "trait_name": "task_answer",
            "goal": "g",
            "code": code,
        },
    )
    assert refused.status_code == 409 and refused.json()["error"] == "TASK_ALREADY_CLAIMED", refused.text
    assert claimant.agent_id in refused.json()["detail"]

    await redis_client.pexpire(keys.agent_task_claim(task_id), 5_000)  # nearly lapsed...
    mutation_id = await propose(http, code, trait_name="task_answer", agent_id=claimant_name, task_id=task_id)
    assert await redis_client.pttl(keys.agent_task_claim(task_id)) > 60_000  # ...renewed by the proposal

    status = await wait_for_verdict(http, mutation_id)
    assert status["status"] in ("sandbox_ok", "activated", "kept"), status
    event = await next_event(task_events, task_id, "TaskClosed", timeout_s=30)
    assert event == {
        "event": "TaskClosed",
        "task_id": task_id,
        "reason": "mutation_activated",
        "mutation_id": mutation_id,
        "detail": None,
    }
    await wait_listed(http, task_id, present=False)
    result = await task_result(temporal_client, task_id)
    assert result.reason == TaskEndReason.mutation_activated and result.mutation_id == mutation_id
    assert await redis_client.exists(keys.agent_task_claim(task_id)) == 0
    rollback = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "test cleanup"}, headers=claimant.headers
    )
    assert rollback.status_code in (200, 202), rollback.text
    # The whole run, with its signal to the task, replays against the current workflow code.
    handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
    await asyncio.wait_for(handle.result(), 60)
    history = await handle.fetch_history()
    await assert_replays(history, [MutationWorkflow])
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        with open(os.path.join(HISTORIES, "mutation_task_activated.json"), "w") as f:
            f.write(history.to_json())


async def test_activation_for_a_task_that_is_gone_still_goes_live(http, temporal_client):
    """Signalling a task that expired (or never existed) does not disturb the mutation."""
    code = traits.seeker(uuid.uuid4().int % 100_000 + 200_000)
    mutation_id = await propose(http, code, trait_name="late_answer", task_id=f"task_gone_{uuid.uuid4().hex[:6]}")
    deadline = time.monotonic() + 60
    while (status := (await http.get(f"/api/mutations/{mutation_id}/status")).json())["status"] not in (
        "activated",
        "kept",
        "rejected",
        "failed",
        "rolled_back",
    ):
        assert time.monotonic() < deadline, status
        await asyncio.sleep(0.1)
    assert status["status"] == "activated", status
    cleanup = await http.post(
        f"/api/mutations/{mutation_id}/rollback",
        json={"reason": "test cleanup"},
        headers=(await agents.agent(http)).headers,
    )
    assert cleanup.status_code in (200, 202), cleanup.text
