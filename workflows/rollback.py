"""RollbackWorkflow: roll back a mutation whose MutationWorkflow has already ended (status kept)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import MutationStatus, RollbackRequest, RollbackResult, StatusUpdate
    from genesis.workflow_api import ROLLBACK_WORKFLOW


@workflow.defn(name=ROLLBACK_WORKFLOW)
class RollbackWorkflow:
    @workflow.run
    async def run(self, request: RollbackRequest, log: list[str]) -> RollbackResult:
        result: RollbackResult = await workflow.execute_activity(
            names.ROLLBACK_TRAIT,
            request,
            result_type=RollbackResult,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=timedelta(minutes=30),
            retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30)),
        )
        restored = f"; v{result.restored_version} restored" if result.restored_version else ""
        await workflow.execute_local_activity(
            names.RECORD_MUTATION_STATUS,
            StatusUpdate(
                mutation_id=request.mutation_id,
                status=MutationStatus.rolled_back,
                validation_log=[*log, f"Rollback: {request.reason}{restored}"],
                rollback_reason=request.reason,
            ),
            start_to_close_timeout=timedelta(seconds=30),
        )
        return result
