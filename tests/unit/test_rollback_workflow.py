"""Every branch of RollbackWorkflow on Temporal's time-skipping server, with its activities
replaced by name: the rollback, the rolled_back record and the optional webhook to the
proposal's notify_url. The real activities run in tests/stack/test_lifecycle.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from genesis.dto import (
    MutationStatus,
    RollbackRequest,
    RollbackResult,
    StatusUpdate,
    WebhookDelivery,
    WebhookResult,
)
from genesis.workflow_api import ROLLBACK_WORKFLOW
from tests.workflow_doubles import fail_scripted, record_call, unique_queue
from workflows.rollback import ROLLBACK_SEQUENCE, RollbackWorkflow

LOG = ["AST: OK", "Sandbox: OK — 120 ticks", "Activated v3", "Kept"]
NOTIFY_URL = "https://agent.example/hooks"


def rollback(**changes) -> RollbackRequest:
    body = {"mutation_id": f"mut{uuid.uuid4().hex[:8]}", "trait_name": "Forager", "reason": "fitness fell", **changes}
    return RollbackRequest(**body)


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt)."""

    result: RollbackResult = field(
        default_factory=lambda: RollbackResult(rolled_back=True, restored_version=2, registry_version=7)
    )
    rollback: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    record: list[Exception] = field(default_factory=list)
    webhook: list[Exception] = field(default_factory=list)
    webhook_always: Exception | None = None  # raised by every attempt
    calls: list[tuple[str, int]] = field(default_factory=list)
    records: list[StatusUpdate] = field(default_factory=list)
    deliveries: list[WebhookDelivery] = field(default_factory=list)

    def activities(self) -> list:
        @activity.defn(name=names.ROLLBACK_TRAIT)
        async def rollback_trait(request: RollbackRequest) -> RollbackResult:
            record_call(self.calls, "rollback", self.rollback)
            return self.result

        @activity.defn(name=names.RECORD_MUTATION_STATUS)
        async def record_mutation_status(change: StatusUpdate) -> None:
            record_call(self.calls, "record", self.record)
            self.records.append(change)

        @activity.defn(name=names.DELIVER_WEBHOOK)
        async def deliver_webhook(delivery: WebhookDelivery) -> WebhookResult:
            attempt = activity.info().attempt
            self.calls.append(("webhook", attempt))
            self.deliveries.append(delivery)
            if self.webhook_always is not None:
                raise self.webhook_always
            fail_scripted(self.webhook, attempt)
            return WebhookResult(status_code=204, attempt=attempt)

        return [rollback_trait, record_mutation_status, deliver_webhook]


async def run_rollback(env, script: Script, request: RollbackRequest, log: list[str] = LOG) -> RollbackResult:
    queue = unique_queue("rollback")
    async with Worker(env.client, task_queue=queue, workflows=[RollbackWorkflow], activities=script.activities()):
        return await env.client.execute_workflow(
            ROLLBACK_WORKFLOW,
            args=[request, log],
            id=f"rollback-{request.mutation_id}",
            task_queue=queue,
            result_type=RollbackResult,
        )


async def test_a_rollback_that_restores_a_version_records_it_in_the_log(skipping_env):
    script = Script()
    request = rollback()
    result = await run_rollback(skipping_env, script, request)
    assert script.calls == [("rollback", 1), ("record", 1)]  # no notify_url: no webhook
    assert result == script.result
    assert script.records == [
        StatusUpdate(
            mutation_id=request.mutation_id,
            status=MutationStatus.rolled_back,
            validation_log=[*LOG, "Rollback: fitness fell; v2 restored"],
            rollback_reason="fitness fell",
        )
    ]


async def test_a_rollback_with_nothing_to_restore_logs_only_its_reason(skipping_env):
    script = Script(result=RollbackResult(rolled_back=True, restored_version=None, registry_version=None))
    result = await run_rollback(skipping_env, script, rollback())
    assert result.restored_version is None
    assert script.records[0].validation_log == [*LOG, "Rollback: fitness fell"]


async def test_the_owner_is_told_by_webhook_when_the_proposal_gave_a_notify_url(skipping_env):
    script = Script()
    request = rollback(agent_id="agt_1", notify_url=NOTIFY_URL, webhook_retry_window_s=600)
    result = await run_rollback(skipping_env, script, request)
    assert script.calls == [("rollback", 1), ("record", 1), ("webhook", 1)]
    assert result == script.result
    (delivery,) = script.deliveries
    assert delivery.delivery_id == f"{request.mutation_id}.{ROLLBACK_SEQUENCE}"
    assert (delivery.agent_id, delivery.notify_url) == ("agt_1", NOTIFY_URL)
    event = delivery.event
    assert event["event"] == "MutationStatusChanged" and event["sequence"] == ROLLBACK_SEQUENCE
    assert (event["previous_status"], event["status"]) == ("kept", "rolled_back")
    assert event["message"] == "Rollback: fitness fell" and event["rollback_reason"] == "fitness fell"
    assert event["status_url"] == f"/api/mutations/{request.mutation_id}/status"
    assert delivery.deadline == pytest.approx(event["occurred_at"] + 600, abs=0.01)


@pytest.mark.parametrize(
    "contact", [{"agent_id": "agt_1"}, {"notify_url": NOTIFY_URL}], ids=["agent_without_url", "url_without_agent"]
)
async def test_no_webhook_without_both_an_agent_and_a_notify_url(skipping_env, contact):
    script = Script()
    await run_rollback(skipping_env, script, rollback(**contact))
    assert script.calls == [("rollback", 1), ("record", 1)]


async def test_a_webhook_that_fails_at_first_is_retried_until_delivered(skipping_env):
    script = Script(webhook=[RuntimeError("connection reset")] * 2)
    await run_rollback(skipping_env, script, rollback(agent_id="agt_1", notify_url=NOTIFY_URL))
    assert [attempt for name, attempt in script.calls if name == "webhook"] == [1, 2, 3]
    assert {delivery.delivery_id for delivery in script.deliveries} == {script.deliveries[0].delivery_id}


@pytest.mark.parametrize("refusal", ["WEBHOOK_URL_FORBIDDEN", "WEBHOOK_REFUSED"])
async def test_a_refused_webhook_is_not_retried_and_the_rollback_still_succeeds(skipping_env, caplog, refusal):
    script = Script(webhook_always=ApplicationError("no", type=refusal))  # retryable, but listed as not
    request = rollback(agent_id="agt_1", notify_url=NOTIFY_URL)
    result = await run_rollback(skipping_env, script, request)
    assert script.calls == [("rollback", 1), ("record", 1), ("webhook", 1)]
    assert result == script.result
    assert f"webhook {request.mutation_id}.{ROLLBACK_SEQUENCE} not delivered" in caplog.text


async def test_a_webhook_never_delivered_within_its_window_is_given_up_and_the_rollback_succeeds(skipping_env, caplog):
    script = Script(webhook_always=RuntimeError("receiver down"))
    request = rollback(
        agent_id="agt_1", notify_url=NOTIFY_URL, webhook_retry_window_s=5, webhook_max_retry_interval_s=1
    )
    result = await run_rollback(skipping_env, script, request)
    assert result == script.result and len(script.records) == 1
    assert [name for name, _ in script.calls].count("webhook") >= 2  # retried until the window closed
    assert f"webhook {request.mutation_id}.{ROLLBACK_SEQUENCE} not delivered" in caplog.text


async def test_infrastructure_errors_of_the_rollback_and_its_record_are_retried(skipping_env):
    script = Script(rollback=[ConnectionError("the database is away")], record=[ConnectionError("again")] * 2)
    result = await run_rollback(skipping_env, script, rollback())
    assert script.calls == [("rollback", 1), ("rollback", 2), ("record", 1), ("record", 2), ("record", 3)]
    assert result == script.result and len(script.records) == 1
