"""A deliberately non-deterministic change of a Genesis workflow, for the replay tests: the
TaskWorkflow as if someone had replaced its expiry timer by an activity. A module of its own
(no drivers) because the Replayer re-imports a workflow's module in its sandbox."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from genesis.workflow_api import TASK_WORKFLOW


@workflow.defn(name=TASK_WORKFLOW)
class TaskWorkflowWithoutTimer:
    @workflow.run
    async def run(self, task: dict) -> None:
        await workflow.execute_local_activity("publish_task", task, start_to_close_timeout=timedelta(seconds=5))
        await workflow.execute_activity("close_task", task, start_to_close_timeout=timedelta(seconds=5))
