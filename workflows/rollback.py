"""RollbackWorkflow: roll back a mutation whose MutationWorkflow has already ended (status kept)."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import MutationStatus, RollbackRequest, RollbackResult, StatusUpdate, WebhookDelivery
    from genesis.workflow_api import ROLLBACK_WORKFLOW

# A kept mutation has sent validating, sandbox_ok, activated and kept: this is its 5th change.
ROLLBACK_SEQUENCE = 5


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
        if request.notify_url and request.agent_id:
            await self._notify(request)
        return result

    async def _notify(self, request: RollbackRequest) -> None:
        """The kept → rolled_back change, to the proposal's notify_url (as MutationWorkflow does)."""
        now = workflow.now().timestamp()
        delivery = WebhookDelivery(
            delivery_id=f"{request.mutation_id}.{ROLLBACK_SEQUENCE}",
            mutation_id=request.mutation_id,
            agent_id=request.agent_id or "",
            notify_url=request.notify_url or "",
            deadline=now + request.webhook_retry_window_s,
            event={
                "event": "MutationStatusChanged",
                "sequence": ROLLBACK_SEQUENCE,
                "mutation_id": request.mutation_id,
                "agent_id": request.agent_id,
                "trait_name": request.trait_name,
                "status": MutationStatus.rolled_back.value,
                "previous_status": MutationStatus.kept.value,
                "failure_reason_code": None,
                "message": f"Rollback: {request.reason}",
                "occurred_at": round(now, 3),
                "status_url": f"/api/mutations/{request.mutation_id}/status",
                "rollback_reason": request.reason,
            },
        )
        try:
            await workflow.execute_activity(
                names.DELIVER_WEBHOOK,
                delivery,
                start_to_close_timeout=timedelta(seconds=30),
                schedule_to_close_timeout=timedelta(seconds=request.webhook_retry_window_s),
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1),
                    backoff_coefficient=2.0,
                    maximum_interval=timedelta(seconds=request.webhook_max_retry_interval_s),
                    non_retryable_error_types=["WEBHOOK_URL_FORBIDDEN", "WEBHOOK_REFUSED"],
                ),
            )
        except ActivityError as err:
            workflow.logger.warning("webhook %s not delivered: %s", delivery.delivery_id, err)
