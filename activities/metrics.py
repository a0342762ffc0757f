"""Prometheus metrics of the mutation pipeline, measured where its work runs: in the worker's
activities (served by genesis.metrics.serve_metrics on GENESIS_WORKER_METRICS_PORT).

One activity interceptor times every stage and reads each verdict from the activity's own result
or failure, so the activities themselves stay free of bookkeeping. A retried activity counts
once per attempt (an infrastructure error, then the verdict)."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import Counter, Histogram
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import ActivityInboundInterceptor, ExecuteActivityInput, Interceptor

from activities import names
from genesis.workflow_api import CHECK_WORKFLOW

# Activity -> pipeline stage (validate → sandbox → activate → … rollback).
STAGES = {
    names.VALIDATE_AND_RECORD_MUTATION: "validate",
    names.RUN_SANDBOX_TEST: "sandbox",
    names.ACTIVATE_TRAIT: "activate",
    names.ROLLBACK_TRAIT: "rollback",
}
INFRASTRUCTURE_ERROR = "infrastructure_error"  # the activity raised: retried, not a verdict

STAGE_SECONDS = Histogram(
    "genesis_mutation_stage_duration_seconds",
    "Duration of one attempt of a mutation stage; outcome is ok, a failure code, or infrastructure_error",
    ["stage", "outcome"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
SANDBOX_VERDICTS = Counter(
    "genesis_sandbox_verdicts",
    "Sandbox test results: ok, a SANDBOX_* failure code, or infrastructure_error",
    ["verdict"],
)
SANDBOX_SECONDS = Histogram(
    "genesis_sandbox_test_duration_seconds",
    "Wall time of one sandbox test (container start to verdict)",
    ["verdict"],
    buckets=(0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0),
)
VALIDATIONS = Counter(
    "genesis_mutation_validations",
    "Gatekeeper + dedupe results: ok or the failure code (AST_*, DUPLICATE_CODE)",
    ["verdict"],
)
# Counted where the writes happen (MutationRecordActivities.record): by the status activity and
# the validation activity, both with the records their workflow hands them.
STATUS_TRANSITIONS = Counter(
    "genesis_mutation_status_transitions",
    "Mutation status writes by the new status",
    ["status"],
)


def _outcome_of_error(exc: BaseException) -> str:
    if isinstance(exc, ApplicationError) and exc.non_retryable and exc.type:
        return exc.type  # a verdict carried as the error type, e.g. AST_IMPORT_FORBIDDEN
    return INFRASTRUCTURE_ERROR


def _outcome_of_result(activity_type: str, result: Any) -> str:
    if activity_type == names.RUN_SANDBOX_TEST:
        return getattr(result, "verdict", "ok")
    return "ok"


def record(activity_type: str, args: tuple, seconds: float, outcome: str, workflow_type: str | None = None) -> None:
    # A check's sandbox test is a sandbox test (counted below) but no stage of a mutation.
    stage = STAGES.get(activity_type) if workflow_type != CHECK_WORKFLOW else None
    if stage is not None:
        STAGE_SECONDS.labels(stage, outcome).observe(seconds)
    if activity_type == names.RUN_SANDBOX_TEST:
        SANDBOX_VERDICTS.labels(outcome).inc()
        SANDBOX_SECONDS.labels(outcome).observe(seconds)
    elif activity_type == names.VALIDATE_AND_RECORD_MUTATION and outcome != INFRASTRUCTURE_ERROR:
        VALIDATIONS.labels(outcome).inc()


class _TimedActivity(ActivityInboundInterceptor):
    async def execute_activity(self, input: ExecuteActivityInput) -> Any:
        info = activity.info()
        activity_type, workflow_type = info.activity_type, info.workflow_type
        started = time.perf_counter()
        try:
            result = await self.next.execute_activity(input)
        except BaseException as exc:
            outcome = _outcome_of_error(exc)
            record(activity_type, tuple(input.args), time.perf_counter() - started, outcome, workflow_type)
            raise
        outcome = _outcome_of_result(activity_type, result)
        record(activity_type, tuple(input.args), time.perf_counter() - started, outcome, workflow_type)
        return result


class PipelineMetrics(Interceptor):
    """``Worker(..., interceptors=[PipelineMetrics()])``."""

    def intercept_activity(self, next: ActivityInboundInterceptor) -> ActivityInboundInterceptor:
        return _TimedActivity(next)
