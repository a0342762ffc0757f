"""Workflows of the world's journal: ReplayVerifyWorkflow (replay a range of ticks and compare the
recorded state hashes; visible with its progress in the Temporal UI) and AuditManifestWorkflow
(sign an audit export's manifest)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import AuditManifestRequest, ReplayVerifyReport, ReplayVerifyRequest
    from genesis.workflow_api import (
        AUDIT_MANIFEST_WORKFLOW,
        REPLAY_VERIFY_WORKFLOW,
        audit_task_queue,
        journal_task_queue,
    )

# Runs started before it signed on the journal queue, behind replays and shadows.
AUDIT_QUEUE = "audit-queue"


@workflow.defn(name=REPLAY_VERIFY_WORKFLOW)
class ReplayVerifyWorkflow:
    @workflow.run
    async def run(self, request: ReplayVerifyRequest) -> ReplayVerifyReport:
        return await workflow.execute_activity(
            names.VERIFY_REPLAY,
            request,
            result_type=ReplayVerifyReport,
            task_queue=journal_task_queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(hours=2),
            heartbeat_timeout=timedelta(seconds=60),
            retry_policy=RetryPolicy(maximum_attempts=3, non_retryable_error_types=["REPLAY_UNAVAILABLE"]),
        )


@workflow.defn(name=AUDIT_MANIFEST_WORKFLOW)
class AuditManifestWorkflow:
    @workflow.run
    async def run(self, request: AuditManifestRequest) -> dict:
        queue = audit_task_queue if workflow.patched(AUDIT_QUEUE) else journal_task_queue
        return await workflow.execute_activity(
            names.SIGN_AUDIT_MANIFEST,
            request,
            result_type=dict,
            task_queue=queue(workflow.info().task_queue),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(maximum_attempts=5),
        )
