"""Asking for a mutation's rollback: one path for the API (POST /api/mutations/{id}/rollback) and
the engine (a quarantined trait).

While its MutationWorkflow runs (activated), the workflow is signalled ``rollback`` and ends
``rolled_back``; once it has ended ``kept``, a RollbackWorkflow (id ``rollback-<mutation_id>``,
started at most once) does the rollback and records it."""

from __future__ import annotations

from enum import Enum

from temporalio.client import Client
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError, RPCStatusCode

from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.dto import MutationStatus, RollbackRequest
from genesis.workflow_api import ROLLBACK_WORKFLOW, rollback_workflow_id, search_attributes

ROLLBACK_SIGNAL = "rollback"  # MutationWorkflow's signal; its argument is the reason


class RollbackRoute(str, Enum):
    signalled = "signalled"  # the running MutationWorkflow was told
    rollback_workflow = "rollback_workflow"  # a RollbackWorkflow runs (or already ran) it


class WorkflowNotRunning(Exception):
    """The mutation's workflow was not found running: not started yet, or it ended a moment ago
    (read the record again: a ``kept`` one is rolled back through a RollbackWorkflow)."""


async def request_rollback(client: Client, settings: Settings, record: Mutation, reason: str) -> RollbackRoute:
    """Roll back the mutation of ``record`` (status ``activated`` or ``kept``) with ``reason``.
    Raises WorkflowNotRunning if its MutationWorkflow could not be signalled; other Temporal
    errors propagate."""
    if record.status == MutationStatus.kept.value:
        await client.start_workflow(
            ROLLBACK_WORKFLOW,
            args=[
                RollbackRequest(
                    mutation_id=record.mutation_id,
                    trait_name=record.trait_name,
                    reason=reason,
                    agent_id=record.agent_id,
                    notify_url=record.notify_url,
                    webhook_retry_window_s=settings.webhook.retry_window_s,
                    webhook_max_retry_interval_s=settings.webhook.max_retry_interval_s,
                ),
                record.validation_log or [],
            ],
            id=rollback_workflow_id(record.mutation_id),
            task_queue=settings.task_queue,
            search_attributes=search_attributes(agent_id=record.agent_id, trait_name=record.trait_name),
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        return RollbackRoute.rollback_workflow
    try:
        await client.get_workflow_handle(record.workflow_id).signal(ROLLBACK_SIGNAL, reason)
    except RPCError as exc:
        if exc.status != RPCStatusCode.NOT_FOUND:
            raise
        raise WorkflowNotRunning(f"workflow {record.workflow_id} is not running") from exc
    return RollbackRoute.signalled
