"""The sandbox activity writes its verdict into the mutation record the moment its test ends
(and says so in its report, so the workflow does not write it again). Real Docker trait host, real Postgres, the
activity run with Temporal's activity test environment, no workflow at all."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import select
from temporalio.testing import ActivityEnvironment

from activities.mutations import MutationRecordActivities
from activities.sandbox import SandboxActivities
from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from genesis.dto import SandboxRequest, sandbox_verdict_update
from genesis.ids import new_mutation_id
from tests import traits

LOG_BEFORE = ["Syntax: OK", "Deduplication: OK"]


@pytest.fixture(scope="module")
def sandbox(settings):
    activities = SandboxActivities(Settings().override(database_url=settings.database_url, sandbox_pool_size=0))
    yield activities
    activities.close()


async def mutation_row(sessions, code: str) -> str:
    mutation_id = new_mutation_id()
    async with sessions() as session:
        session.add(Mutation(mutation_id=mutation_id, agent_id="verdict-test", trait_name="verdict_trait", code=code,
                             status="validating", validation_log=LOG_BEFORE, holds_code_hash=True,
                             code_hash=mutation_id.ljust(64, "0"), workflow_id=f"mutation-{mutation_id}"))
        await session.commit()
    return mutation_id


async def row(sessions, mutation_id: str) -> Mutation:
    async with sessions() as session:
        return await session.scalar(select(Mutation).where(Mutation.mutation_id == mutation_id))


async def run_test(sandbox: SandboxActivities, request: SandboxRequest):
    # The activity is sync (it blocks on Docker): in a thread, so this loop can run its write.
    return await asyncio.to_thread(ActivityEnvironment().run, sandbox.run_sandbox_test, request)


@pytest.mark.parametrize("code, class_name, status, final", [
    (traits.SEED_EXAMPLE, "EnergyHoarderTrait", "sandbox_ok", True),
    (traits.RAISES, "ExplodingTrait", "rejected", True),
])
async def test_the_verdict_is_in_the_record_when_the_activity_returns(settings, sandbox, code, class_name, status, final):
    sessions = get_sessionmaker(settings.database_url)
    sandbox.record_verdicts(MutationRecordActivities(sessions).record, asyncio.get_running_loop())
    mutation_id = await mutation_row(sessions, code)
    request = SandboxRequest(mutation_id=mutation_id, trait_name="verdict_trait", class_name=class_name, code=code,
                             log_before_verdict=LOG_BEFORE, final_if_ok=final)
    report = await run_test(sandbox, request)
    record = await row(sessions, mutation_id)
    expected = sandbox_verdict_update(mutation_id, report, LOG_BEFORE, final)  # what the workflow writes next
    assert record.status == status == expected.status.value
    assert record.validation_log == expected.validation_log and record.validation_log[:2] == LOG_BEFORE
    assert report.recorded  # the workflow will not write it again
    assert record.sandbox_report == report.model_dump(exclude={"recorded"}) and "recorded" not in record.sandbox_report
    assert record.failure_reason_code == (None if status == "sandbox_ok" else "SANDBOX_EXCEPTION")
    assert record.holds_code_hash is (status == "sandbox_ok")  # rejected code may be proposed again


async def test_a_request_without_the_log_leaves_the_record_to_the_workflow(settings, sandbox):
    sessions = get_sessionmaker(settings.database_url)
    sandbox.record_verdicts(MutationRecordActivities(sessions).record, asyncio.get_running_loop())
    mutation_id = await mutation_row(sessions, traits.SEED_EXAMPLE)
    report = await run_test(sandbox, SandboxRequest(mutation_id=mutation_id, trait_name="verdict_trait",
                                                    class_name="EnergyHoarderTrait", code=traits.SEED_EXAMPLE))
    assert report.verdict == "ok" and not report.recorded
    record = await row(sessions, mutation_id)
    assert record.status == "validating" and record.validation_log == LOG_BEFORE and record.sandbox_report is None
