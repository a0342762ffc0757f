"""One writer of a mutation's status: the sandbox activity returns its verdict and writes nothing;
the MutationWorkflow records it (status, the log ending with the verdict's line, the report the
activity returned). Real Docker trait host, real Postgres; the activity alone in Temporal's
activity test environment, then whole workflows through an API with activation off (its
sandbox_ok history is tests/histories/mutation_sandbox_ok.json)."""

from __future__ import annotations

import asyncio
import uuid

import httpx
import pytest
from sqlalchemy import select
from temporalio.api.enums.v1 import EventType
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import ActivityEnvironment

from activities import names
from activities.sandbox import SandboxActivities
from cli.replay import command_events
from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from genesis.dto import SandboxReport, SandboxRequest
from genesis.ids import new_mutation_id
from tests import traits
from tests.pipeline_steps import propose, replay_and_maybe_record, wait_for_verdict

LOG_BEFORE = ["Syntax: OK", "Deduplication: OK", "Sandbox: running verdict_trait in a fresh trait-host container"]


@pytest.fixture(scope="module")
def sandbox(settings):
    activities = SandboxActivities(Settings().override(database_url=settings.database_url, sandbox_pool_size=0))
    yield activities
    activities.close()


@pytest.fixture(scope="module")
async def no_activation_api(start_api) -> str:
    """An API with activation off (as GENESIS_ACTIVATE_MUTATIONS=false): a sandbox verdict is final."""
    return await start_api("api-no-activation", activate_mutations=False)


async def mutation_row(sessions, code: str) -> str:
    mutation_id = new_mutation_id()
    async with sessions() as session:
        session.add(
            Mutation(
                mutation_id=mutation_id,
                agent_id="verdict-test",
                trait_name="verdict_trait",
                code=code,
                status="validating",
                validation_log=LOG_BEFORE,
                holds_code_hash=True,
                code_hash=mutation_id.ljust(64, "0"),
                workflow_id=f"mutation-{mutation_id}",
            )
        )
        await session.commit()
    return mutation_id


async def row(sessions, mutation_id: str) -> Mutation:
    async with sessions() as session:
        return await session.scalar(select(Mutation).where(Mutation.mutation_id == mutation_id))


@pytest.mark.parametrize(
    "code, class_name, verdict",
    [
        (traits.SEED_EXAMPLE, "EnergyHoarderTrait", "ok"),
        (traits.RAISES, "ExplodingTrait", "SANDBOX_EXCEPTION"),
    ],
)
async def test_the_sandbox_activity_returns_its_verdict_and_writes_nothing(
    settings, sandbox, code, class_name, verdict
):
    sessions = get_sessionmaker(settings.database_url)
    mutation_id = await mutation_row(sessions, code)
    before = await row(sessions, mutation_id)
    request = SandboxRequest(mutation_id=mutation_id, trait_name="verdict_trait", class_name=class_name, code=code)
    # The activity is sync (it blocks on Docker): in a thread, as the worker runs it.
    report = await asyncio.to_thread(ActivityEnvironment().run, sandbox.run_sandbox_test, request)
    assert report.verdict == verdict and report.summary
    after = await row(sessions, mutation_id)
    assert (after.status, after.validation_log, after.sandbox_report, after.failure_reason_code, after.updated_at) == (
        "validating",
        LOG_BEFORE,
        None,
        None,
        before.updated_at,
    )


async def history_after_status(temporal_client, workflow_id: str):
    """The workflow's history once the local activity that wrote the status is in it: the row is
    written while the activity runs, its marker reaches the history when the workflow task that
    ran it completes, a moment later."""
    handle = temporal_client.get_workflow_handle(workflow_id)
    for _ in range(100):
        history = await handle.fetch_history()
        commands = command_events(history)
        sandbox_at = next((c.event_id for c in commands if c.name == names.RUN_SANDBOX_TEST), None)
        if sandbox_at is not None and any(c.event_id > sandbox_at and c.kind == "local activity" for c in commands):
            return history
        await asyncio.sleep(0.1)
    return history


@pytest.mark.parametrize("status", ["rejected", "sandbox_ok"])
async def test_the_workflow_records_the_verdict_the_activity_returned(no_activation_api, temporal_client, status):
    # Code no other test proposes (else DUPLICATE_CODE): a message of its own, a seeker of its own.
    code = (
        traits.RAISES.replace('"boom"', f'"boom {uuid.uuid4().hex}"')
        if status == "rejected"
        else traits.unique_seeker()
    )
    async with httpx.AsyncClient(base_url=no_activation_api, timeout=30) as http:
        mutation_id = await propose(http, code, trait_name=f"verdict_{status}")
        record = await wait_for_verdict(http, mutation_id)
    assert record["status"] == status, record
    history = await history_after_status(temporal_client, record["workflow_id"])
    completed = next(
        e.activity_task_completed_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    [returned] = pydantic_data_converter.payload_converter.from_payloads(completed.result.payloads, [SandboxReport])
    assert record["sandbox_report"] == returned.model_dump()
    log = record["validation_log"]
    assert log[-1] == (
        returned.log_line() if status == "sandbox_ok" else f"Sandbox: FAILED — SANDBOX_EXCEPTION: {returned.summary}"
    )
    assert not any(line.startswith("Sandbox: running") for line in log)  # the verdict's line replaced it
    # The verdict was written by the workflow's own status activity, after the sandbox test.
    commands = command_events(history)
    sandbox_at = next(c.event_id for c in commands if c.name == names.RUN_SANDBOX_TEST)
    assert [c.name for c in commands if c.event_id > sandbox_at and c.kind == "local activity"] == [
        names.RECORD_MUTATION_STATUS
    ]
    if status == "sandbox_ok":
        await replay_and_maybe_record(temporal_client, mutation_id, "mutation_sandbox_ok")
