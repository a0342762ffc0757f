"""GepaStepWorkflow (id ``gepa-<program_id>``): one GEPA optimisation step.

    start (local: in_progress, parent branch) -> mutate (worktree on program_<id>, prompt, code
    or merge mutation, commit) -> run (the program on test_examples in the client's sandbox container)
    -> finish (local: record the response; worktree policy)

Orchestration only. Verdicts on the input end the step as ``failed`` with the activity's message;
infrastructure errors are retried a few times, then also end it as ``failed``. The finish step
always runs, so nothing is left in progress or checked out."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from gepa_steps.dto import (
        GEPA_STEP_PROGRESS_QUERY,
        GEPA_STEP_WORKFLOW,
        MutationOutcome,
        ProgramRun,
        ProgramStatus,
        ProgramStatusUpdate,
        StepRequest,
        StepResult,
    )

INFRA_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=5),
    maximum_attempts=3,
    non_retryable_error_types=["GEPA_STEP_FAILED"],
)
RUN_HEARTBEAT = timedelta(seconds=10)
DB_RETRY = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=10),
    non_retryable_error_types=["GEPA_STEP_FAILED"],
)


def innermost_failure(error: BaseException) -> BaseException:
    """The activity's own error inside Temporal's wrappers."""
    while isinstance(error, ActivityError) and error.cause is not None:
        error = error.cause
    return error


def failure_message(error: BaseException) -> str:
    """The innermost message: the activity's own explanation, not Temporal's wrapper."""
    error = innermost_failure(error)
    return getattr(error, "message", None) or str(error) or type(error).__name__


@workflow.defn(name=GEPA_STEP_WORKFLOW)
class GepaStepWorkflow:
    def __init__(self) -> None:
        self._stage = "pending"

    @workflow.query(name=GEPA_STEP_PROGRESS_QUERY)
    def progress(self) -> str:
        return self._stage

    @workflow.run
    async def run(self, request: StepRequest) -> StepResult:
        mutation: MutationOutcome | None = None
        try:
            self._stage = "starting"
            start = await workflow.execute_local_activity(
                names.GEPA_START_PROGRAM,
                request,
                result_type=str,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=DB_RETRY,
                schedule_to_close_timeout=timedelta(minutes=10),
            )
            self._stage = f"{request.mutation_type} mutation"
            mutation = await workflow.execute_activity(
                names.GEPA_MUTATE,
                args=[request, start],
                result_type=MutationOutcome,
                start_to_close_timeout=timedelta(minutes=15),
                heartbeat_timeout=timedelta(minutes=11),
                retry_policy=INFRA_RETRY,
            )
            self._stage = "running the program"
            run = await workflow.execute_activity(
                names.GEPA_RUN_PROGRAM,
                request,
                result_type=ProgramRun,
                # It heartbeats every few seconds (also while an environment installs), so a run
                # whose worker died is retried on another within RUN_HEARTBEAT.
                start_to_close_timeout=timedelta(minutes=30),
                heartbeat_timeout=RUN_HEARTBEAT,
                retry_policy=INFRA_RETRY,
            )
            result = StepResult(
                program_id=request.program_id,
                status="success",
                pipeline_outputs=run.pipeline_outputs,
                traces=run.traces if request.capture_traces else None,
                branch_name=mutation.branch_name,
                program_json=mutation.program_json,
                commit=mutation.commit,
                merge=mutation.merge,
            )
        except (ActivityError, ApplicationError) as error:
            result = StepResult(
                program_id=request.program_id,
                status="failed",
                error=failure_message(error),
                branch_name=None,
                program_json=mutation.program_json if mutation else None,
            )
        self._stage = "recording"
        await workflow.execute_local_activity(
            names.GEPA_FINISH_PROGRAM,
            ProgramStatusUpdate(
                program_id=request.program_id,
                status=ProgramStatus.completed if result.status == "success" else ProgramStatus.failed,
                branch_name=result.branch_name,
                program_json=result.program_json,
                result=result,
            ),
            start_to_close_timeout=timedelta(seconds=60),
            retry_policy=DB_RETRY,
            schedule_to_close_timeout=timedelta(hours=1),
        )
        self._stage = result.status
        return result
