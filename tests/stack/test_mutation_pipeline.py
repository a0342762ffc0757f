"""End to end over HTTP: API → Temporal → worker → gatekeeper → Docker sandbox → status."""

from __future__ import annotations

import asyncio
import os
import time
import uuid

import docker
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from genesis.workflow_api import SA_STATUS
from sandbox.container import containers_of as sandbox_containers_of
from tests import agents, traits
from tests.pipeline_steps import HISTORIES, PASSED, propose, wait_for_verdict
from tests.replays import assert_replays
from workflows.mutation import MutationWorkflow


def unique_agent() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def containers_of(mutation_id: str) -> list:
    return sandbox_containers_of(docker.from_env(), mutation_id)


async def assert_containers_gone(mutation_id: str, within_s: float = 10) -> None:
    """The trait's process ends with the verdict; the container is removed right after it."""
    deadline = time.monotonic() + within_s
    while containers_of(mutation_id):
        assert time.monotonic() < deadline, f"containers of {mutation_id} still exist"
        await asyncio.sleep(0.1)


async def test_seed_example_reaches_sandbox_ok(http, temporal_client):
    mutation_id = await propose(http, traits.SEED_EXAMPLE, agent_id="claude-external-1")
    status = await wait_for_verdict(http, mutation_id)
    assert status["status"] in PASSED, status
    assert status["failure_reason_code"] is None
    registered = await agents.agent(http, "claude-external-1")
    assert status["agent_id"] == registered.agent_id and status["trait_name"] == "energy_hoarder"
    assert status["created_at"] <= status["updated_at"]
    log = status["validation_log"]
    assert log[0] == "Schema: OK" and "AST parse: OK" in log
    assert any(line.startswith("Sandbox: OK") for line in log)
    report = status["sandbox_report"]
    assert report["verdict"] == "ok" and 50 <= report["ticks_run"] < 100 and report["calls"] > 0
    assert report["projected_fps"] > 30
    await assert_containers_gone(mutation_id)

    handle = temporal_client.get_workflow_handle_for(MutationWorkflow.run, status["workflow_id"])
    assert (await handle.describe()).status in (WorkflowExecutionStatus.RUNNING, WorkflowExecutionStatus.COMPLETED)
    queried = await handle.query(MutationWorkflow.status)
    assert queried.status.value in PASSED
    # The same run (so far) replays deterministically against the current workflow code.
    history = await handle.fetch_history()
    await assert_replays(history, [MutationWorkflow])


async def test_workflow_is_searchable_by_custom_attributes(http, temporal_client):
    name = unique_agent()
    agent = (await agents.agent(http, name)).agent_id
    mutation_id = await propose(http, traits.seeker(101), trait_name="searchable_seeker", agent_id=name)
    status = await wait_for_verdict(http, mutation_id)
    query = f'GenesisAgentId = "{agent}" AND GenesisTraitName = "searchable_seeker"'
    deadline = time.monotonic() + 10
    found: list = []
    while time.monotonic() < deadline and not found:
        found = [wf async for wf in temporal_client.list_workflows(query)]
        await asyncio.sleep(0.2)
    assert [wf.id for wf in found] == [f"mutation-{mutation_id}"]
    assert status["status"] in PASSED
    described = await temporal_client.get_workflow_handle(f"mutation-{mutation_id}").describe()
    assert described.typed_search_attributes.get(SA_STATUS) in PASSED
    rejected = await wait_for_verdict(
        http,
        await propose(
            http, traits.INFINITE_LOOP.replace("Spinner", "Spin2"), trait_name="searchable_spinner", agent_id=name
        ),
    )
    assert rejected["failure_reason_code"] == "SANDBOX_TIMEOUT"
    query = f'GenesisAgentId = "{agent}" AND GenesisFailureCode = "SANDBOX_TIMEOUT" AND GenesisStatus = "rejected"'
    deadline = time.monotonic() + 10
    found = []
    while time.monotonic() < deadline and not found:
        found = [wf async for wf in temporal_client.list_workflows(query)]
        await asyncio.sleep(0.2)
    assert [wf.id for wf in found] == [f"mutation-{rejected['mutation_id']}"]


async def test_trait_that_raises_is_rejected_with_sandbox_exception(http):
    mutation_id = await propose(http, traits.RAISES, trait_name="exploding")
    status = await wait_for_verdict(http, mutation_id)
    assert status["status"] == "rejected"
    assert status["failure_reason_code"] == "SANDBOX_EXCEPTION"
    assert "ValueError: boom" in status["validation_log"][-1]
    assert "line 7" in status["sandbox_report"]["first_error"]


async def test_infinite_loop_times_out_and_its_container_is_gone(http):
    mutation_id = await propose(http, traits.INFINITE_LOOP, trait_name="spinner")
    status = await wait_for_verdict(http, mutation_id)
    assert status["status"] == "rejected"
    assert status["failure_reason_code"] == "SANDBOX_TIMEOUT"
    assert "Sandbox: FAILED — SANDBOX_TIMEOUT" in status["validation_log"][-1]
    await assert_containers_gone(mutation_id)


async def test_forbidden_import_is_rejected_by_the_gatekeeper(http):
    mutation_id = await propose(http, traits.FORBIDDEN_IMPORT, trait_name="sneaky")
    status = await wait_for_verdict(http, mutation_id)
    assert status["status"] == "rejected"
    assert status["failure_reason_code"] == "AST_IMPORT_FORBIDDEN"
    assert status["validation_log"][-1].startswith("Import whitelist: FAILED — Forbidden import: os")
    assert status["sandbox_report"] is None


async def test_same_code_twice_is_a_duplicate(http):
    code = traits.seeker(202)
    first = await wait_for_verdict(http, await propose(http, code, trait_name="seeker_a"))
    assert first["status"] in PASSED
    second = await wait_for_verdict(
        http, await propose(http, code + "\n# same logic, new comment\n", trait_name="seeker_b")
    )
    assert second["status"] == "rejected"
    assert second["failure_reason_code"] == "DUPLICATE_CODE"
    assert first["mutation_id"] in second["validation_log"][-1]


async def test_a_rolled_back_mutation_gives_its_code_back_to_its_owner(http, operator_http):
    """Rolled back, the code is its owner's to propose again (the world may have changed since);
    for anyone else it stays taken."""
    from tests.pipeline_steps import wait_for_status

    code = traits.seeker(212)
    first = await propose(http, code, trait_name="seeker_again")
    await wait_for_status(http, first, {"activated", "kept"}, timeout_s=90)
    answer = await operator_http.post(f"/api/mutations/{first}/rollback", json={"reason": "dedupe test"})
    assert answer.status_code in (200, 202), answer.text
    await wait_for_status(http, first, {"rolled_back"}, timeout_s=60)

    stranger = await agents.agent(http, unique_agent())
    copied = await http.post(
        "/api/mutations/check", json={"trait_name": "seeker_copy", "code": code}, headers=stranger.headers
    )
    assert copied.json()["failure_reason_code"] == "DUPLICATE_CODE", copied.text
    own = await http.post(
        "/api/mutations/check",
        json={"trait_name": "seeker_again", "code": code},
        headers=(await agents.agent(http, agents.DEFAULT_AGENT)).headers,
    )
    assert own.json()["failure_reason_code"] is None, own.text
    assert f"the code of your rolled-back mutation {first}" in "\n".join(own.json()["validation_log"])
    again = await wait_for_verdict(http, await propose(http, code, trait_name="seeker_again"))
    assert again["status"] in PASSED, again
    assert again["code_hash"] == (await http.get(f"/api/mutations/{first}/status")).json()["code_hash"]


async def test_idempotency_key_returns_the_same_mutation(http):
    body = {"trait_name": "idem", "code": traits.seeker(303)}
    headers = {"Idempotency-Key": uuid.uuid4().hex, **await agents.headers(http, unique_agent())}
    first = await http.post("/api/mutations/propose", json=body, headers=headers)
    second = await http.post("/api/mutations/propose", json=body, headers=headers)
    assert first.status_code == second.status_code == 202
    assert first.json()["mutation_id"] == second.json()["mutation_id"]
    status = await wait_for_verdict(http, first.json()["mutation_id"])
    assert status["status"] in PASSED
    reused = await http.post("/api/mutations/propose", json={**body, "code": traits.seeker(304)}, headers=headers)
    assert reused.status_code == 409 and reused.json()["error"] == "IDEMPOTENCY_KEY_REUSED"


async def test_worker_killed_mid_sandbox_still_ends_with_one_verdict(http, worker, temporal_client):
    mutation_id = await propose(http, traits.seeker(404), trait_name="survivor")
    deadline = time.monotonic() + 60
    while not containers_of(mutation_id):  # the sandbox activity is running
        assert time.monotonic() < deadline, "the sandbox never started"
        await asyncio.sleep(0.02)
    worker.kill()
    worker.start()
    status = await wait_for_verdict(http, mutation_id, timeout_s=120)
    assert status["status"] in PASSED, status
    await assert_containers_gone(mutation_id)  # including the killed attempt's

    history = await temporal_client.get_workflow_handle(f"mutation-{mutation_id}").fetch_history()
    scheduled = {
        e.event_id: e.activity_task_scheduled_event_attributes.activity_type.name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED
    }
    sandbox_completions = [
        e
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
        and scheduled[e.activity_task_completed_event_attributes.scheduled_event_id] == "run_sandbox_test"
    ]
    # The first sandbox attempt died with the worker; exactly one attempt delivered the verdict.
    assert len(sandbox_completions) == 1
    verdicts = [line for line in status["validation_log"] if line.startswith("Sandbox: OK")]
    assert len(verdicts) == 1


@pytest.mark.parametrize(
    "path", sorted(p for p in os.listdir(HISTORIES) if p.endswith(".json")) if os.path.isdir(HISTORIES) else []
)
async def test_recorded_histories_replay(path):
    from temporalio.client import WorkflowHistory

    with open(os.path.join(HISTORIES, path)) as f:
        history = WorkflowHistory.from_json(f"recorded-{path}", f.read())
    await assert_replays(history)  # on every workflow the worker registers
