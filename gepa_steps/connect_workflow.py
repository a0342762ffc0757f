"""GepaConnectWorkflow (id ``gepa-connect-<client_id>``): clone a client's repository once
(POST /connect-git) and record whether it worked. Orchestration only."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from gepa_steps.dto import GEPA_CONNECT_WORKFLOW, STEP_FAILED, ConnectRequest, ConnectResult

from gepa_steps.step_workflow import DB_RETRY, INFRA_RETRY, failure_message, innermost_failure


def refusal_code(error: BaseException) -> str | None:
    """The code of a refusal that has one (an activity's non-retryable ApplicationError typed
    other than the generic verdict, e.g. a GitHub App refusal); None for the rest."""
    error = innermost_failure(error)
    if isinstance(error, ApplicationError) and error.non_retryable and error.type and error.type != STEP_FAILED:
        return error.type
    return None


@workflow.defn(name=GEPA_CONNECT_WORKFLOW)
class GepaConnectWorkflow:
    @workflow.run
    async def run(self, request: ConnectRequest) -> ConnectResult:
        try:
            result = await workflow.execute_activity(
                names.GEPA_CLONE_REPOSITORY,
                request,
                result_type=ConnectResult,
                start_to_close_timeout=timedelta(minutes=15),
                retry_policy=INFRA_RETRY,
            )
        except ActivityError as exc:
            result = ConnectResult(
                client_id=request.client_id, error=failure_message(exc), error_code=refusal_code(exc)
            )
        await workflow.execute_local_activity(
            names.GEPA_RECORD_CLIENT,
            args=[request.client_id, "failed" if result.error else "connected", result.default_branch, result.error],
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=DB_RETRY,
            schedule_to_close_timeout=timedelta(minutes=30),
        )
        return result
