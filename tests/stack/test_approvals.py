"""Approval of risky mutations on real services: with the manifest holding an agent's first trait
for an operator, a proposal passes its sandbox test and waits at ``awaiting_approval``; an
operator's approval sends it live, a rejection ends it ``APPROVAL_REJECTED``, an agent's key
decides nothing, and an undecided one expires as ``APPROVAL_EXPIRED`` on its durable timer
(time-skipping server, the real worker's activities in this process)."""

from __future__ import annotations

import asyncio
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from activities.sandbox import SandboxActivities
from api.workflow_starter import start_mutation_workflow
from cli.client import EXIT_AWAITING_APPROVAL
from genesis.db.models import Mutation
from genesis.temporal_setup import ensure_search_attributes
from governance.records import manifests
from pipeline.mutation_proposals import mutation_input
from tests import agents, traits
from tests.cli_runs import invoke, record_history, run_cli
from tests.pipeline_steps import wait_for_status
from worker import build_workers

QUEUE = "genesis-test-approvals"


@pytest.fixture(scope="module")
async def first_trait_waits(settings):
    """The manifest holds an agent's first trait for an operator, for this module."""
    database = create_async_engine(settings.database_url, poolclass=NullPool)
    async with database.begin() as conn:
        before = await manifests.current(conn, settings)
        approvals = {**before.document["approvals"], "first_traits": 1, "ttl_sec": 3600}
        now = await manifests.record(conn, {**before.document, "approvals": approvals}, "test: approvals", before.hash)
    yield now
    async with database.begin() as conn:
        await manifests.record(conn, before.document, "test: restored", now.hash)
    await database.dispose()


async def propose(http, agent, name: str) -> str:
    body = {"trait_name": name, "goal": "approval", "code": traits.unique_seeker()}
    answer = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
    assert answer.status_code == 202, answer.text
    return answer.json()["mutation_id"]


async def test_an_agents_first_trait_waits_for_an_operator(http, operator_http, first_trait_waits):
    ann = await agents.register(http, "approval-ann")
    mutation_id = await propose(http, ann, "approval_first")
    waiting = await wait_for_status(http, mutation_id, {"awaiting_approval"})
    assert "waiting for an operator (one of the agent's first 1 traits)" in waiting["validation_log"][-1]
    # the suite's worker has no journal to fork a shadow from (tests/stack/test_trait_shadow.py has)
    assert waiting["validation_log"][-2] == "Shadow: not run (no journal to fork from); decide on the sandbox report"
    assert waiting["shadow_report"] is None
    assert waiting["sandbox_report"]["verdict"] == "ok"
    await asyncio.sleep(1.0)  # it waits: nothing moves without a decision
    assert (await http.get(f"/api/mutations/{mutation_id}/status")).json()["status"] == "awaiting_approval"
    refused = await http.post(
        f"/api/mutations/{mutation_id}/approval", json={"decision": "approve"}, headers=ann.headers
    )
    assert refused.status_code == 403 and refused.json()["error"] == "OPERATOR_KEY_REQUIRED"
    approved = await operator_http.post(f"/api/mutations/{mutation_id}/approval", json={"decision": "approve"})
    assert approved.status_code == 202, approved.text
    live = await wait_for_status(http, mutation_id, {"activated", "kept"})
    assert any(line.startswith("Approval: approved by ") for line in live["validation_log"])
    again = await operator_http.post(f"/api/mutations/{mutation_id}/approval", json={"decision": "approve"})
    assert again.status_code == 409 and again.json()["error"] == "NOT_AWAITING_APPROVAL"
    # its second trait does not wait: one trait went live
    second = await propose(http, ann, "approval_second")
    second_status = await wait_for_status(http, second, {"activated", "kept", "awaiting_approval"})
    assert second_status["status"] != "awaiting_approval"
    for live_one in (mutation_id, second):  # out of the world again, for the modules after this one
        await http.post(f"/api/mutations/{live_one}/rollback", json={"reason": "test over"}, headers=ann.headers)
        await wait_for_status(http, live_one, {"rolled_back"}, timeout_s=90)


async def test_a_rejected_one_ends_rejected_with_the_reason(
    api_url, http, settings, temporal_client, first_trait_waits
):
    """Over the CLI: following a held mutation stops at awaiting_approval (exit 8), and an
    operator's key rejects it."""
    bob = await agents.register(http, "approval-bob")
    mutation_id = await propose(http, bob, "approval_rejected")
    await wait_for_status(http, mutation_id, {"awaiting_approval"})
    code, out, _ = await run_cli(api_url, "status", mutation_id, "--follow", key=bob.api_key, timeout=60)
    assert code == EXIT_AWAITING_APPROVAL and "Awaiting approval: an operator decides" in out, out
    operator = (await agents.operator_headers(settings))["X-Operator-Key"]
    code, out, err = await invoke(
        api_url, "mutations", "reject", mutation_id, "--reason", "not in my world", operator_key=operator
    )
    assert code == 0 and "reject sent" in out, out + err
    done = await wait_for_status(http, mutation_id, {"rejected"})
    assert done["failure_reason_code"] == "APPROVAL_REJECTED"
    assert done["validation_log"][-1].endswith(": not in my world")
    await record_history(temporal_client, f"mutation-{mutation_id}", "mutation_approval_rejected")


async def test_an_undecided_one_expires_on_its_durable_timer(settings, skipping_env, start_api, first_trait_waits):
    """The proposal is admitted by an API whose workflows start on a queue nobody polls; its
    workflow is started again on the time-skipping server (whose client lets it skip the
    workflow's time while a result is awaited), where this process runs the real worker."""
    await ensure_search_attributes(skipping_env.client, "default")  # the workflow sets them
    worker_settings = settings.override(task_queue=QUEUE)
    url = await start_api("approvals-idle", task_queue=f"{QUEUE}-idle")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        carl = await agents.register(http, "approval-carl")
        mutation_id = await propose(http, carl, "approval_expired")
    database = create_async_engine(settings.database_url, poolclass=NullPool)
    async with async_sessionmaker(database)() as session:
        record = await session.get(Mutation, mutation_id)
    await database.dispose()
    sandbox = await asyncio.to_thread(SandboxActivities, worker_settings)
    try:
        with ThreadPoolExecutor(max_workers=2) as executor:
            pipeline, _llm, journal, *_ = build_workers(skipping_env.client, worker_settings, executor, sandbox)
            async with pipeline, journal:
                started = time.monotonic()
                handle = await start_mutation_workflow(
                    skipping_env.client, worker_settings, mutation_input(record, settings), record.workflow_id
                )
                result = await asyncio.wait_for(handle.result(), 90)
    finally:
        await asyncio.to_thread(sandbox.close)
    assert (result["status"], result["failure_reason_code"]) == ("rejected", "APPROVAL_EXPIRED"), result
    assert "no operator decided within 3600 s" in result["validation_log"][-1]
    assert time.monotonic() - started < 60  # an hour of waiting, in seconds
