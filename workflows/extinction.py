"""Selection after the verdict, as workflows a kept mutation's life may go on with.

- ExtinctionWorkflow (``extinction-<mutation_id>``): the engine's ledger saw no Molbot carry the
  trait for the manifest's ``extinction_ticks``: it leaves the live set, status ``extinct``.
- RevivalWorkflow (``revival-<mutation_id>``): its owner (or an operator) brings an extinct trait
  back, status ``kept``; refused while another version of the trait is live, or when a full
  live set cannot make room.

Each is one activity (activities/selection.py) and the record of the new status with its receipt.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import FateRequest, FateResult, MutationStatus, StatusUpdate
    from genesis.workflow_api import EXTINCTION_WORKFLOW, REVIVAL_WORKFLOW

RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


async def _change(activity: str, request: FateRequest, status: MutationStatus, line: str) -> FateResult:
    result: FateResult = await workflow.execute_activity(
        activity,
        request,
        result_type=FateResult,
        start_to_close_timeout=timedelta(seconds=30),
        schedule_to_close_timeout=timedelta(minutes=30),
        retry_policy=RETRY,
    )
    if result.changed:
        await workflow.execute_local_activity(
            names.RECORD_MUTATION_STATUS,
            StatusUpdate(
                mutation_id=request.mutation_id,
                status=status,
                validation_log=[*result.log, f"{line}: {request.reason}"],
                fate_reason=request.reason,
            ),
            start_to_close_timeout=timedelta(seconds=30),
        )
    return result


@workflow.defn(name=EXTINCTION_WORKFLOW)
class ExtinctionWorkflow:
    @workflow.run
    async def run(self, request: FateRequest) -> FateResult:
        return await _change(names.RETIRE_TRAIT, request, MutationStatus.extinct, "Extinct")


@workflow.defn(name=REVIVAL_WORKFLOW)
class RevivalWorkflow:
    @workflow.run
    async def run(self, request: FateRequest) -> FateResult:
        return await _change(names.REVIVE_TRAIT, request, MutationStatus.kept, "Revived")
