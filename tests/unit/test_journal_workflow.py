"""Every branch of ReplayVerifyWorkflow and AuditManifestWorkflow on Temporal's time-skipping
server, with their activities replaced by name on the queues the workflows send them to (the
journal and audit queues): retries, non-retryable errors, and the AUDIT_QUEUE patch (new runs
sign on the audit queue; a history from before the patch replays on the journal queue)."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowFailureError
from temporalio.common import RetryPolicy
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ActivityError, ApplicationError
from temporalio.worker import (
    Interceptor,
    Replayer,
    StartActivityInput,
    UnsandboxedWorkflowRunner,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from activities import names
from activities.journal import REPLAY_UNAVAILABLE
from genesis.dto import AuditManifestRequest, ReplayVerifyReport, ReplayVerifyRequest
from genesis.workflow_api import AUDIT_MANIFEST_WORKFLOW, REPLAY_VERIFY_WORKFLOW, audit_task_queue, journal_task_queue
from tests.workflow_doubles import fail_scripted, unique_queue
from workflows.journal import AUDIT_QUEUE, AuditManifestWorkflow, ReplayVerifyWorkflow

REPORT = ReplayVerifyReport(
    equal=True,
    from_tick=0,
    to_tick=100,
    epoch=1,
    snapshot="snap-0",
    snapshot_tick=0,
    head_seq=140,
    head_tick=120,
    records_replayed=140,
    ticks_checked=100,
    elapsed_sec=0.4,
    replay_ticks_per_second=250.0,
)
MANIFEST = {"files": [{"name": "audit.jsonl", "sha256": "a" * 64}]}


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt, task queue)."""

    verify: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    sign: list[Exception] = field(default_factory=list)
    calls: list[tuple[str, int, str]] = field(default_factory=list)

    def activities(self) -> list:
        @activity.defn(name=names.VERIFY_REPLAY)
        async def verify_replay(request: ReplayVerifyRequest) -> ReplayVerifyReport:
            attempt = self.called("verify")
            fail_scripted(self.verify, attempt)
            return REPORT.model_copy(update={"from_tick": request.from_tick, "to_tick": request.to_tick})

        @activity.defn(name=names.SIGN_AUDIT_MANIFEST)
        async def sign_audit_manifest(request: AuditManifestRequest) -> dict:
            attempt = self.called("sign")
            fail_scripted(self.sign, attempt)
            return {"kind": "audit.export", "body": {"manifest": request.manifest}, "signature": "sig"}

        return [verify_replay, sign_audit_manifest]

    def called(self, name: str) -> int:
        info = activity.info()
        self.calls.append((name, info.attempt, info.task_queue))
        return info.attempt


@workflow.defn(name=AUDIT_MANIFEST_WORKFLOW)
class AuditManifestBeforeThePatch:
    """AuditManifestWorkflow as it was before AUDIT_QUEUE: it signed on the journal queue."""

    @workflow.run
    async def run(self, request: AuditManifestRequest) -> dict:
        return await workflow.execute_activity(
            names.SIGN_AUDIT_MANIFEST,
            request,
            result_type=dict,
            task_queue=journal_task_queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=5),
        )


# (the workflow's task queue, its activity's) for each activity a replayed workflow scheduled
SCHEDULED_QUEUES: list[tuple[str, str]] = []


class RecordScheduledQueues(Interceptor):
    def workflow_interceptor_class(self, input: WorkflowInterceptorClassInput) -> type[WorkflowInboundInterceptor]:
        return _Inbound


class _Inbound(WorkflowInboundInterceptor):
    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        super().init(_Outbound(outbound))


class _Outbound(WorkflowOutboundInterceptor):
    def start_activity(self, input: StartActivityInput):
        SCHEDULED_QUEUES.append((workflow.info().task_queue, input.task_queue or ""))
        return super().start_activity(input)


async def replayed_queues(handle) -> list[tuple[str, str]]:
    """(its task queue, the activity's) for each activity the real AuditManifestWorkflow schedules
    replaying ``handle``'s history (the Replayer raises on a non-deterministic replay)."""
    SCHEDULED_QUEUES.clear()
    replayer = Replayer(
        workflows=[AuditManifestWorkflow],
        data_converter=pydantic_data_converter,
        interceptors=[RecordScheduledQueues()],
    )
    await replayer.replay_workflow(await handle.fetch_history())
    return list(SCHEDULED_QUEUES)


async def run_journal_workflow(
    env,
    script: Script,
    workflow_name: str,
    argument,
    result_type,
    workflows=(ReplayVerifyWorkflow, AuditManifestWorkflow),
):
    """The workflows on their queue, the fakes on each queue a workflow may send its activity to;
    returns the handle, the workflow's queue, and its result or its WorkflowFailureError."""
    queue = unique_queue("journal")
    fakes = script.activities()
    # the test module's own workflow runs outside the sandbox, which would re-import this module
    runner = UnsandboxedWorkflowRunner() if AuditManifestBeforeThePatch in workflows else SandboxedWorkflowRunner()
    async with (
        Worker(env.client, task_queue=queue, workflows=list(workflows), workflow_runner=runner),
        Worker(env.client, task_queue=journal_task_queue(queue), activities=fakes),
        Worker(env.client, task_queue=audit_task_queue(queue), activities=fakes),
    ):
        handle = await env.client.start_workflow(
            workflow_name, argument, id=f"journal-{uuid.uuid4().hex[:8]}", task_queue=queue, result_type=result_type
        )
        try:
            return handle, queue, await handle.result()
        except WorkflowFailureError as failure:
            return handle, queue, failure


async def test_a_replay_runs_on_the_journal_queue_and_returns_its_report(skipping_env):
    script = Script()
    request = ReplayVerifyRequest(from_tick=10, to_tick=90)
    _, queue, report = await run_journal_workflow(
        skipping_env, script, REPLAY_VERIFY_WORKFLOW, request, ReplayVerifyReport
    )
    assert script.calls == [("verify", 1, journal_task_queue(queue))]
    assert report == REPORT.model_copy(update={"from_tick": 10, "to_tick": 90})


async def test_an_unavailable_replay_is_not_retried_and_fails_the_workflow(skipping_env):
    # retryable as raised: the workflow's retry policy is what stops it
    script = Script(verify=[ApplicationError("no snapshot before tick 10", type=REPLAY_UNAVAILABLE)])
    _, _, failure = await run_journal_workflow(
        skipping_env, script, REPLAY_VERIFY_WORKFLOW, ReplayVerifyRequest(from_tick=10, to_tick=90), ReplayVerifyReport
    )
    assert [call[:2] for call in script.calls] == [("verify", 1)]
    assert isinstance(failure, WorkflowFailureError) and isinstance(failure.cause, ActivityError)
    assert failure.cause.cause.type == REPLAY_UNAVAILABLE


async def test_a_replay_that_keeps_crashing_is_tried_three_times_then_fails(skipping_env):
    script = Script(verify=[ApplicationError("the replay stopped with exit status 1")] * 3)
    _, _, failure = await run_journal_workflow(
        skipping_env, script, REPLAY_VERIFY_WORKFLOW, ReplayVerifyRequest(from_tick=0, to_tick=5), ReplayVerifyReport
    )
    assert [call[:2] for call in script.calls] == [("verify", 1), ("verify", 2), ("verify", 3)]
    assert isinstance(failure, WorkflowFailureError) and isinstance(failure.cause, ActivityError)


async def test_a_new_audit_manifest_run_signs_on_the_audit_queue(skipping_env):
    script = Script()
    handle, queue, receipt = await run_journal_workflow(
        skipping_env, script, AUDIT_MANIFEST_WORKFLOW, AuditManifestRequest(manifest=MANIFEST), dict
    )
    assert script.calls == [("sign", 1, audit_task_queue(queue))]
    assert receipt == {"kind": "audit.export", "body": {"manifest": MANIFEST}, "signature": "sig"}
    markers = [
        event.marker_recorded_event_attributes
        async for event in handle.fetch_history_events()
        if event.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    (patch,) = markers  # recorded for its replays, which take the same path
    assert json.loads(patch.details["patch-data"].payloads[0].data) == {"id": AUDIT_QUEUE, "deprecated": False}
    ((replay_queue, sign_queue),) = await replayed_queues(handle)
    assert sign_queue == audit_task_queue(replay_queue)  # its replays take the patched path too


async def test_a_signature_that_keeps_failing_is_tried_five_times_then_fails(skipping_env):
    script = Script(sign=[ConnectionError("the database is away")] * 5)
    _, queue, failure = await run_journal_workflow(
        skipping_env, script, AUDIT_MANIFEST_WORKFLOW, AuditManifestRequest(manifest=MANIFEST), dict
    )
    assert [attempt for _, attempt, _ in script.calls] == [1, 2, 3, 4, 5]
    assert {task_queue for *_, task_queue in script.calls} == {audit_task_queue(queue)}
    assert isinstance(failure, WorkflowFailureError) and isinstance(failure.cause, ActivityError)


async def test_a_history_from_before_the_patch_replays_on_the_journal_queue(skipping_env):
    script = Script()
    handle, queue, _ = await run_journal_workflow(
        skipping_env,
        script,
        AUDIT_MANIFEST_WORKFLOW,
        AuditManifestRequest(manifest=MANIFEST),
        dict,
        workflows=[AuditManifestBeforeThePatch],
    )
    assert script.calls == [("sign", 1, journal_task_queue(queue))]
    ((replay_queue, sign_queue),) = await replayed_queues(handle)
    assert sign_queue == journal_task_queue(replay_queue)
