"""Operator keys on real services: every operator endpoint refuses a keyless call, an agent's key,
a bad and a revoked operator key, and accepts a valid one; `genesis operator` makes, lists and
revokes keys; schedules of other programs in the namespace are invisible and untouchable; forced
triggers have their own limit and neither open nor obey the Watcher's circuit breaker; open mode
says so loudly at start."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from datetime import timedelta

import httpx
from temporalio.client import (
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleSpec,
    ScheduleState,
)

from api.app import create_app
from api.auth import require_operator
from cli.processes import LOG_DIR
from evolution.watcher import cooldown_key
from genesis import redis_keys as keys
from genesis.config import PROJECT_ROOT
from tests import agents
from tests.api_routes import http_routes
from tests.evolution_worlds import BASE, write_snapshots

OPERATOR_ROUTES = {
    ("POST", "/api/agents/tasks"),
    ("POST", "/api/agents/tasks/{task_id}/resolve"),
    ("POST", "/api/schedules"),
    ("POST", "/api/schedules/{schedule_id}/pause"),
    ("POST", "/api/schedules/{schedule_id}/resume"),
    ("DELETE", "/api/schedules/{schedule_id}"),
    ("POST", "/api/evolution/trigger"),
    ("POST", "/v1/world/rollback"),
    ("GET", "/v1/world/replay/verify"),
    ("GET", "/v1/journal/status"),
    ("GET", "/v1/audit/events"),
    ("GET", "/v1/audit/export"),
    ("POST", "/v1/agents/{agent_id}/capabilities"),
    ("DELETE", "/v1/agents/{agent_id}/capabilities/{capability}"),
    ("POST", "/v1/policy/simulate"),
    ("GET", "/v1/policy/decisions"),
    ("POST", "/v1/governance/proposals/{proposal_id}/approve"),
    ("POST", "/api/mutations/{mutation_id}/approval"),
    ("POST", "/v1/governance/proposals/{proposal_id}/reject"),
    ("POST", "/v1/agents/invitations"),
}
# A request of each operator route that only the missing key can refuse.
SAMPLE = {
    "/api/agents/tasks": {"problem_type": "starvation", "severity": "low", "description": "auth test"},
    "/api/schedules": {"interval_s": 3600, "paused": True},
    "/api/evolution/trigger": {"anomaly_type": "stagnation"},
    "/v1/world/rollback": {"tick": 0, "reason": "auth test"},
    "/v1/agents/{agent_id}/capabilities": {"capabilities": ["traits.propose"]},
    "/v1/policy/simulate": {"role": "agent", "action": "traits.propose"},
    "/v1/governance/proposals/{proposal_id}/approve": {"report_hash": "0" * 64},
    "/v1/governance/proposals/{proposal_id}/reject": {"reason": "auth test"},
    "/api/mutations/{mutation_id}/approval": {"decision": "approve"},
    "/v1/agents/invitations": {"note": "auth test"},
}
QUERIES = {"/v1/world/replay/verify": "?from=0&to=1"}


def operator_routes(settings) -> set[tuple[str, str]]:
    """The routes of the app that depend on require_operator."""
    return {
        (method, path)
        for method, path, route in http_routes(create_app(settings))
        if any(d.call is require_operator for d in route.dependant.dependencies)
    }


def concrete(path: str) -> str:
    concrete_path = path.replace("{task_id}", "task_auth_probe").replace("{schedule_id}", "auth-probe")
    concrete_path = concrete_path.replace("{agent_id}", "agt_auth_probe").replace("{capability}", "traits.propose")
    concrete_path = concrete_path.replace("{proposal_id}", "gov_0123456789abcdef")
    concrete_path = concrete_path.replace("{mutation_id}", "mut_0123456789ab")
    return concrete_path + QUERIES.get(path, "")


async def test_every_operator_route_needs_an_operator_key(http, settings):
    assert operator_routes(settings) == OPERATOR_ROUTES
    agent = await agents.agent(http)
    revoked = await agents.new_operator(settings, "revoked-operator")
    done = await _cli("operator", "revoke-key", revoked.key_prefix, "--json", settings=settings)
    assert done[0] == 0, done
    bogus = "genop_0123abcd_" + "A" * 43
    for method, path in sorted(OPERATOR_ROUTES):
        url, body = concrete(path), SAMPLE.get(path)
        cases = [
            ({}, 401, "OPERATOR_KEY_REQUIRED", "genesis operator create-key"),
            (agent.headers, 403, "OPERATOR_KEY_REQUIRED", "an agent's X-API-Key does not open it"),
            ({"X-API-Key": revoked.key}, 401, "OPERATOR_KEY_REQUIRED", "send it in the X-Operator-Key header"),
            ({"X-Operator-Key": bogus}, 401, "INVALID_OPERATOR_KEY", "not a valid operator key"),
            ({"X-Operator-Key": agent.api_key}, 401, "INVALID_OPERATOR_KEY", "not a valid operator key"),
            (revoked.headers, 401, "INVALID_OPERATOR_KEY", "revoked"),
        ]
        for headers, status, error, needle in cases:
            response = await http.request(method, url, json=body, headers=headers)
            assert response.status_code == status, (method, path, headers, response.text)
            assert response.json()["error"] == error and needle in response.json()["detail"], response.text
            if status == 401:
                assert response.headers["WWW-Authenticate"] == 'ApiKey header="X-Operator-Key"'


async def test_an_operator_key_opens_them(http, operator_http, redis_client):
    published = await operator_http.post("/api/agents/tasks", json=SAMPLE["/api/agents/tasks"])
    assert published.status_code == 201, published.text
    task_id = published.json()["task_id"]
    await asyncio.sleep(0.5)  # its TaskWorkflow writes it
    resolved = await operator_http.post(f"/api/agents/tasks/{task_id}/resolve", json={"reason": "auth test"})
    assert resolved.status_code == 202, resolved.text

    schedule_id = f"auth-{uuid.uuid4().hex[:8]}"
    created = await operator_http.post("/api/schedules", json={**SAMPLE["/api/schedules"], "schedule_id": schedule_id})
    assert created.status_code == 201, created.text
    for method, suffix in (("POST", "/resume"), ("POST", "/pause"), ("DELETE", "")):
        response = await operator_http.request(method, f"/api/schedules/{schedule_id}{suffix}")
        assert response.status_code == 200, response.text

    await redis_client.delete(keys.WATCHER_FORCED_COUNTER)
    trigger = await operator_http.post("/api/evolution/trigger", json={"anomaly_type": "stagnation"})
    assert trigger.status_code not in (401, 403), trigger.text  # past auth: the Watcher's own answer
    if trigger.status_code == 202:
        await operator_http.post(f"/api/agents/tasks/{trigger.json()['task_id']}/resolve", json={"reason": "test"})
        await redis_client.delete(cooldown_key("stagnation"))


async def _cli(*args: str, settings) -> tuple[int, str, str]:
    """`python -m cli ...` against the test database and pepper."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_")}
    env.update(
        {
            "GENESIS_DATABASE_URL": settings.database_url,
            "COLUMNS": "200",
            "GENESIS_API_KEY_PEPPER": settings.api.key_pepper.get_secret_value(),
        }
    )
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "cli",
        *args,
        cwd=PROJECT_ROOT,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    return proc.returncode, out.decode(), err.decode()


async def test_operator_key_commands(http, settings):
    code, out, err = await _cli("operator", "create-key", "--name", "night shift", "--json", settings=settings)
    assert code == 0, err
    made = json.loads(out)
    key, prefix = made["operator_key"], made["key_prefix"]
    assert key.startswith(f"genop_{prefix}_") and made["name"] == "night shift" and made["revoked_at"] is None
    task = {"problem_type": "starvation", "severity": "low", "description": "cli key test"}
    published = await http.post("/api/agents/tasks", json=task, headers={"X-Operator-Key": key})
    assert published.status_code == 201, published.text

    code, out, err = await _cli("operator", "list-keys", "--json", settings=settings)
    assert code == 0, err
    listed = {k["key_prefix"]: k for k in json.loads(out)["keys"]}
    assert listed[prefix]["name"] == "night shift" and key not in out  # never the key itself

    code, out, err = await _cli("operator", "revoke-key", prefix, settings=settings)
    assert code == 0 and f"operator key {prefix} (night shift) revoked" in out, err
    refused = await http.post(
        f"/api/agents/tasks/{published.json()['task_id']}/resolve", headers={"X-Operator-Key": key}
    )
    assert refused.status_code == 401 and refused.json()["error"] == "INVALID_OPERATOR_KEY"
    await http.post(
        f"/api/agents/tasks/{published.json()['task_id']}/resolve", headers=await agents.operator_headers(settings)
    )

    code, out, err = await _cli("operator", "revoke-key", "ffffffff", settings=settings)
    assert code == 1 and "no operator key with prefix 'ffffffff'" in err
    code, out, err = await _cli("operator", "create-key", "--name", "  ", settings=settings)
    assert code == 1 and "1-64 printable characters" in err
    code, out, err = await _cli(
        "operator",
        "list-keys",
        settings=settings.model_copy(update={"database_url": "postgresql+asyncpg://genesis:secret@127.0.0.1:1/none"}),
    )
    assert code == 1 and "cannot use the database" in err and "secret" not in err, err


async def test_foreign_schedules_are_not_genesis_business(operator_http, temporal_client, settings):
    """A schedule another program keeps in the namespace: not listed, not shown, not paused or deleted."""
    foreign_id = f"billing-{uuid.uuid4().hex[:8]}"
    await temporal_client.create_schedule(
        foreign_id,
        Schedule(
            action=ScheduleActionStartWorkflow("InvoiceRun", id="invoice-run", task_queue="billing"),
            spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=timedelta(hours=1))]),
            state=ScheduleState(paused=False, note="not Genesis'"),
        ),
    )
    # Genesis' own kind of action, but on another task queue: another Genesis' schedule.
    other_queue_id = f"other-{uuid.uuid4().hex[:8]}"
    from evolution import schedules

    await schedules.create(
        temporal_client, "someone-elses-queue", interval_s=3600, schedule_id=other_queue_id, paused=False
    )
    try:
        for schedule_id in (foreign_id, other_queue_id):
            for method, suffix in (("GET", ""), ("POST", "/pause"), ("POST", "/resume"), ("DELETE", "")):
                response = await operator_http.request(method, f"/api/schedules/{schedule_id}{suffix}")
                assert response.status_code == 404, (method, suffix, response.text)
                assert response.json() == {"error": "SCHEDULE_NOT_FOUND", "detail": f"no schedule {schedule_id!r}"}
            description = await temporal_client.get_schedule_handle(schedule_id).describe()
            assert description.schedule.state.paused is False, "another program's schedule was touched"
        listed = (await operator_http.get("/api/schedules")).json()["schedules"]
        assert not {foreign_id, other_queue_id} & {s["schedule_id"] for s in listed}
    finally:
        for schedule_id in (foreign_id, other_queue_id):
            await temporal_client.get_schedule_handle(schedule_id).delete()


async def test_forced_triggers_have_their_own_limit(start_api, redis_client, settings):
    """Two forced triggers per window here: the third is 429 with Retry-After. The Watcher's circuit
    breaker, open during the test, stops none of them, and they add nothing to its counter."""
    url = await start_api(
        "api-forced", forced_trigger_limit=2, forced_trigger_window_s=60, evolution_cycles_enabled=False
    )
    await redis_client.delete(keys.WATCHER_FORCED_COUNTER, cooldown_key("stagnation"))
    await redis_client.set(keys.WATCHER_CIRCUIT_BREAKER, "1", ex=120)
    await redis_client.set(keys.WATCHER_TRIGGER_COUNTER, "3", ex=120)
    await write_snapshots(redis_client, settings.engine.snapshot_interval, {}, BASE)
    task_ids = []
    headers = await agents.operator_headers(settings)
    try:
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as api:
            for _ in range(2):
                response = await api.post(
                    "/api/evolution/trigger", json={"anomaly_type": "stagnation", "severity": "critical"}
                )
                assert response.status_code == 202, response.text
                task_ids.append(response.json()["task_id"])
            refused = await api.post(
                "/api/evolution/trigger", json={"anomaly_type": "stagnation", "severity": "critical"}
            )
            assert refused.status_code == 429, refused.text
            body = refused.json()
            assert body["error"] == "FORCED_TRIGGER_LIMIT" and "at most 2 forced triggers per 60 s" in body["detail"]
            assert 1 <= body["retry_after_sec"] <= 60 and refused.headers["Retry-After"] == str(body["retry_after_sec"])
        assert await redis_client.get(keys.WATCHER_TRIGGER_COUNTER) == b"3", (
            "forced triggers counted against the Watcher"
        )
        assert await redis_client.get(keys.WATCHER_CIRCUIT_BREAKER) == b"1"
        assert 100 < await redis_client.ttl(keys.WATCHER_CIRCUIT_BREAKER) <= 120, "the breaker was reset or extended"
    finally:
        await redis_client.delete(
            keys.WATCHER_CIRCUIT_BREAKER,
            keys.WATCHER_TRIGGER_COUNTER,
            keys.WATCHER_FORCED_COUNTER,
            cooldown_key("stagnation"),
        )
        async with httpx.AsyncClient(base_url=url, timeout=30, headers=headers) as api:
            for task_id in task_ids:
                await api.post(f"/api/agents/tasks/{task_id}/resolve", json={"reason": "test over"})


async def test_open_mode_is_keyless_and_says_so_at_start(start_api):
    log_path = LOG_DIR / "api-open-operators.log"
    offset = log_path.stat().st_size if log_path.exists() else 0
    url = await start_api("api-open-operators", auth="open")
    deadline = time.monotonic() + 10
    while "GENESIS_AUTH=open: THIS API CHECKS NO KEYS" not in (
        text := log_path.read_bytes()[offset:].decode(errors="replace")
    ):
        assert time.monotonic() < deadline, text
        await asyncio.sleep(0.1)
    assert "warning" in text.lower() and "genesis operator create-key" in text
    async with httpx.AsyncClient(base_url=url, timeout=30) as api:
        published = await api.post("/api/agents/tasks", json=SAMPLE["/api/agents/tasks"])
        assert published.status_code == 201, published.text
        await asyncio.sleep(0.5)
        resolved = await api.post(f"/api/agents/tasks/{published.json()['task_id']}/resolve")
        assert resolved.status_code == 202, resolved.text
        # A key that is sent is still checked.
        bad = await api.post(
            "/api/agents/tasks",
            json=SAMPLE["/api/agents/tasks"],
            headers={"X-Operator-Key": "genop_0123abcd_" + "A" * 43},
        )
        assert bad.status_code == 401 and bad.json()["error"] == "INVALID_OPERATOR_KEY"
