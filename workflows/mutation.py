"""MutationWorkflow: validate → sandbox → verdict, every transition persisted and searchable.

Orchestration only: no I/O here. Activities are referenced by name."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import (
        FailureCode,
        MutationInput,
        MutationResult,
        MutationStatus,
        SandboxReport,
        SandboxRequest,
        StatusUpdate,
        ValidationOutcome,
    )
    from genesis.workflow_api import MUTATION_WORKFLOW, SA_AGENT_ID, SA_FAILURE_CODE, SA_STATUS, SA_TRAIT_NAME

VERDICT_CODES = {code.value for code in FailureCode}

# Short database writes and the pure gatekeeper: local activities, retried on infrastructure errors.
LOCAL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10))
# Docker hiccups are retried for up to an hour of schedule time; verdicts are results, not errors.
SANDBOX_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30))


@workflow.defn(name=MUTATION_WORKFLOW)
class MutationWorkflow:
    def __init__(self) -> None:
        self._result: MutationResult | None = None

    @workflow.query(name="status")
    def status(self) -> MutationResult | None:
        return self._result

    @workflow.run
    async def run(self, mutation: MutationInput) -> MutationResult:
        self._result = MutationResult(mutation_id=mutation.mutation_id, status=MutationStatus.queued)
        workflow.upsert_search_attributes(
            [SA_AGENT_ID.value_set(mutation.agent_id), SA_TRAIT_NAME.value_set(mutation.trait_name)]
        )
        await self._transition(MutationStatus.validating, log=["Accepted: validation started"])

        try:
            outcome: ValidationOutcome = await workflow.execute_local_activity(
                names.VALIDATE_MUTATION,
                mutation,
                result_type=ValidationOutcome,
                start_to_close_timeout=timedelta(seconds=30),
                retry_policy=LOCAL_RETRY,
            )
        except (ActivityError, ApplicationError) as err:
            rejection = _verdict_of(err)
            if rejection is None:  # validation could not run at all (e.g. Postgres down past retries)
                await self._finish(MutationStatus.failed, None, [f"Validation could not run: {_root_message(err)}"])
                raise
            return await self._finish(MutationStatus.rejected, rejection.failure_code, rejection.validation_log)

        log = [*outcome.validation_log, f"Sandbox: running {mutation.trait_name} in a fresh trait-host container"]
        await self._transition(
            MutationStatus.validating, log=log, class_name=outcome.class_name, code_hash=outcome.code_hash
        )
        try:
            report: SandboxReport = await workflow.execute_activity(
                names.RUN_SANDBOX_TEST,
                SandboxRequest(
                    mutation_id=mutation.mutation_id,
                    trait_name=mutation.trait_name,
                    class_name=outcome.class_name or "",
                    code=mutation.code,
                ),
                result_type=SandboxReport,
                start_to_close_timeout=timedelta(minutes=5),
                schedule_to_close_timeout=timedelta(hours=1),
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=SANDBOX_RETRY,
            )
        except ActivityError as err:
            log[-1] = f"Sandbox: could not run (infrastructure): {_root_message(err)}"
            await self._finish(MutationStatus.failed, None, log)
            raise ApplicationError(f"sandbox test could not run: {_root_message(err)}", non_retryable=True) from err

        sandbox_report = report.model_dump()
        if report.verdict == "ok":
            log[-1] = f"Sandbox: OK — {report.summary}"
            return await self._finish(MutationStatus.sandbox_ok, None, log, sandbox_report)
        log[-1] = f"Sandbox: FAILED — {report.verdict}: {report.summary}"
        return await self._finish(MutationStatus.rejected, report.verdict, log, sandbox_report)

    async def _transition(self, status: MutationStatus, *, log: list[str], failure_code: str | None = None,
                          class_name: str | None = None, code_hash: str | None = None,
                          sandbox_report: dict | None = None) -> None:
        assert self._result is not None
        self._result = MutationResult(
            mutation_id=self._result.mutation_id,
            status=status,
            failure_reason_code=failure_code,
            validation_log=log,
            sandbox_report=sandbox_report,
        )
        attributes = [SA_STATUS.value_set(status.value)]
        if failure_code:
            attributes.append(SA_FAILURE_CODE.value_set(failure_code))
        workflow.upsert_search_attributes(attributes)
        await workflow.execute_local_activity(
            names.RECORD_MUTATION_STATUS,
            StatusUpdate(
                mutation_id=self._result.mutation_id,
                status=status,
                failure_reason_code=failure_code,
                validation_log=log,
                class_name=class_name,
                code_hash=code_hash,
                sandbox_report=sandbox_report,
            ),
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=LOCAL_RETRY,
        )

    async def _finish(self, status: MutationStatus, failure_code: str | None, log: list[str],
                      sandbox_report: dict | None = None) -> MutationResult:
        await self._transition(status, log=log, failure_code=failure_code, sandbox_report=sandbox_report)
        assert self._result is not None
        return self._result


def _verdict_of(err: ActivityError | ApplicationError) -> ValidationOutcome | None:
    """The gatekeeper's rejection carried by a non-retryable ApplicationError, if that is what
    failed (a failed local activity may surface wrapped in ActivityError or bare)."""
    cause = err.cause if isinstance(err, ActivityError) else err
    if isinstance(cause, ApplicationError) and cause.type in VERDICT_CODES and cause.details:
        return ValidationOutcome.model_validate(cause.details[0])
    return None


def _root_message(err: BaseException) -> str:
    while err.__cause__ is not None:
        err = err.__cause__
    return str(err)
