"""CheckWorkflow: the gatekeeper and the sandbox test of a proposal, recording nothing.

``POST /api/mutations/check`` starts it and waits for its result. It runs the same activities a
MutationWorkflow runs for the same steps — except that dedupe only reads who holds the code hash
— so the verdict, the validation log and the sandbox report are the ones a proposal of the same
code would get, while no mutation record, registry entry or search attribute is written. The
code runs in the worker's sandbox container, never in the API.

Orchestration only: no I/O here. Activities are referenced by name."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from activities import names
    from genesis.dto import CheckResult, SandboxReport, SandboxRequest, TraitCheck, ValidationOutcome
    from genesis.workflow_api import CHECK_WORKFLOW

# The gatekeeper and one indexed lookup: retried on infrastructure errors within the check's time.
LOCAL_RETRY = RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=5))
# A Docker hiccup is retried while the caller still waits; a verdict is a result, not an error.
SANDBOX_RETRY = RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10))


@workflow.defn(name=CHECK_WORKFLOW)
class CheckWorkflow:
    @workflow.run
    async def run(self, check: TraitCheck) -> CheckResult:
        time_limit = timedelta(seconds=check.timeout_s)
        outcome: ValidationOutcome = await workflow.execute_local_activity(
            names.CHECK_TRAIT_CODE,
            check,
            result_type=ValidationOutcome,
            start_to_close_timeout=timedelta(seconds=30),
            schedule_to_close_timeout=time_limit,
            retry_policy=LOCAL_RETRY,
        )
        if not outcome.ok:
            return CheckResult(
                verdict="rejected",
                failure_reason_code=outcome.failure_code,
                validation_log=outcome.validation_log,
                code_hash=outcome.code_hash,
            )
        try:
            report: SandboxReport = await workflow.execute_activity(
                names.RUN_SANDBOX_TEST,
                SandboxRequest(
                    mutation_id=check.check_id,
                    trait_name=check.trait_name,
                    class_name=outcome.class_name or "",
                    code=check.code,
                ),
                result_type=SandboxReport,
                start_to_close_timeout=time_limit,
                schedule_to_close_timeout=time_limit,
                heartbeat_timeout=timedelta(seconds=10),
                retry_policy=SANDBOX_RETRY,
            )
        except ActivityError as err:  # no verdict: the check fails (the API answers 503 CHECK_FAILED)
            raise ApplicationError("the sandbox test could not run", non_retryable=True) from err
        return CheckResult(
            verdict="passed" if report.passed else "rejected",
            failure_reason_code=None if report.passed else report.verdict,
            validation_log=[*outcome.validation_log, report.log_line()],
            sandbox_report=report.model_dump(),
            code_hash=outcome.code_hash,
        )
